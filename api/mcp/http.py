"""The MCP tools over streamable HTTP at ``/mcp`` of the FastAPI app (stateless, JSON responses),
behind the app's API keys: a request without a valid key gets the same 401 as every route, and a
tool call on a group the key does not cover (or that needs a role it lacks) is refused.

Without the ``mcp`` package (``epimem-server[mcp]``), ``/mcp`` answers 501 with a body that names the
missing extra.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.auth import KeyRing, Role
from api.errors import UnauthorizedError
from api.http.error_handling import error_response

log = logging.getLogger("epimem.mcp")
MCP_PATH = "/mcp"


def mcp_available() -> bool:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        return False
    return True


def _key_guard(keys: KeyRing) -> Any:
    from mcp.server.mcpserver.exceptions import ToolError

    def guard(ctx: Any, group_id: str, role: str) -> str | None:
        """Raises ToolError, or returns who signs the call's changes (the key's ``actor``)."""
        if not keys.enabled:
            return None
        try:
            key = keys.authenticate(ctx.headers or {})
        except UnauthorizedError as error:
            raise ToolError(f"unauthorized: {error.message}") from None
        if not key.covers(group_id):
            raise ToolError("forbidden: this key may not access this group")
        if key.role < Role[role.upper()]:
            raise ToolError(f"forbidden: this key's role ({key.role.name.lower()}) may not do this; needs {role}")
        return key.actor

    return guard


class _KeyedEndpoint:
    """The SDK's request handler behind the API key check (401 before any MCP parsing)."""

    def __init__(self, keys: KeyRing, manager: Any) -> None:
        self.keys = keys
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.keys.enabled:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            try:
                self.keys.authenticate(headers)  # missing, unknown or expired: 401, also for GET's stream
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

    from api.mcp.server import build_server

    keys: KeyRing = app.state.keys
    server = build_server(lambda: app.state.service, guard=_key_guard(keys), limits=app.state.settings)
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
