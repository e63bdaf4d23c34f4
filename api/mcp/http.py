"""The MCP tools over streamable HTTP at ``/mcp`` of the FastAPI app (stateless, JSON responses),
behind the app's API keys: a request without a valid key gets the same 401 as every route, and a
tool call on a group the key does not cover (or that needs a role it lacks), or over a limit of the key
or the group (``api.access.quotas``), is refused.

Without the ``mcp`` package (``epimem-server[mcp]``), ``/mcp`` answers 501 with a body that names the
missing extra.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, cast

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.access.quotas import Quotas
from api.auth import ApiKey, KeyRing, Role
from api.errors import ForbiddenError, TooManyRequestsError, UnauthorizedError
from api.facade import Epimem
from api.http.error_handling import error_response
from memory.lifecycle.audit import LOCAL_ACTOR
from memory.models import Message
from memory.receipts import AddReceipt

log = logging.getLogger("epimem.mcp")
MCP_PATH = "/mcp"


def mcp_available() -> bool:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        return False
    return True


# The key of the MCP call in progress: set by the guard, read by the add's limits (CountedBackend).
_caller: ContextVar[ApiKey | None] = ContextVar("epimem_mcp_caller", default=None)


def _key_guard(keys: KeyRing) -> Any:
    from mcp.server.mcpserver.exceptions import ToolError

    def guard(ctx: Any, group_id: str, role: str) -> str | None:
        """Raises ToolError, or returns who signs the call's changes (the key's ``actor``). The same
        limits as over HTTP: requests per second of the key and the group."""
        try:
            principal = keys.check(ctx.headers or {}, group_id, Role[role.upper()], server_wide=False)
            key = principal.key
            if keys.quotas is not None:
                keys.quotas.admit_request(key.id if key else None, key.limits if key else {}, group_id)
        except (UnauthorizedError, ForbiddenError, TooManyRequestsError) as error:
            raise ToolError(f"{error.code}: {error.message}") from None
        _caller.set(key)
        return key.actor if key is not None else None

    return guard


class CountedBackend:
    """The app's service for the MCP tools, with the add's limits (messages per day, stored characters) of
    the calling key and group, as ``POST .../messages`` applies them."""

    def __init__(self, service: Epimem, quotas: Quotas | None) -> None:
        self._service = service
        self._quotas = quotas

    def add_messages(
        self, group_id: str, session_id: str, messages: Sequence[Message], *, actor: str = LOCAL_ACTOR
    ) -> AddReceipt:
        def add() -> AddReceipt:
            return self._service.add_messages(group_id, session_id, messages, actor=actor)

        def stored(ids: list[str]) -> set[str]:
            return set(self._service.memory.store.log.get_messages(group_id, session_id, ids))

        if self._quotas is None:
            return add()
        key = _caller.get()
        limits = key.limits if key else {}
        return self._quotas.counted(key.id if key else None, limits, group_id, messages, add, stored)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


class _KeyedEndpoint:
    """The SDK's request handler behind the API key check (401 before any MCP parsing)."""

    def __init__(self, keys: KeyRing, manager: Any) -> None:
        self.keys = keys
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.keys.enabled:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            try:
                # missing, unknown, revoked or expired: 401, also for GET's stream (off the event loop: scrypt)
                await run_in_threadpool(self.keys.authenticate, headers)
            except UnauthorizedError as error:
                response = error_response(401, error.code, error.message, None)
                response.headers["www-authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.manager.handle_request(scope, receive, send)


class _NotInstalled:
    """``/mcp`` of a server without the SDK: every method gets 501 naming the extra."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            501,
            "mcp_not_installed",
            "this epimem server was started without MCP support: install the extra with "
            "pip install 'epimem-server[mcp]' (from a clone: pip install -e '.[mcp]') and restart the server",
            {"extra": "mcp"},
        )
        await response(scope, receive, send)


def mount_mcp(app: FastAPI) -> bool:
    """Serve the MCP tools at ``/mcp`` on the app's own service; returns False without the SDK (then
    ``/mcp`` answers 501 naming the extra)."""
    if not mcp_available():
        app.router.routes.append(Route(MCP_PATH, endpoint=_NotInstalled(), include_in_schema=False))
        return False
    from mcp.server.transport_security import TransportSecuritySettings

    from api.mcp.server import Backend, build_server

    keys: KeyRing = app.state.keys
    server = build_server(
        lambda: cast(Backend, CountedBackend(app.state.service, app.state.quotas)),
        guard=_key_guard(keys),
        limits=app.state.settings,
    )
    # Origin and Host are checked by the app's own middleware for every path; the SDK's copy of
    # that check would only know 127.0.0.1.
    server.streamable_http_app(
        json_response=True,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    app.router.routes.append(Route(MCP_PATH, endpoint=_KeyedEndpoint(keys, manager), include_in_schema=False))
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(inner_app: Any) -> AsyncIterator[Any]:
        async with outer(inner_app) as state, manager.run():
            yield state

    app.router.lifespan_context = lifespan
    return True
