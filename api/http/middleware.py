"""One pure-ASGI middleware for what every request (on every path: /v1, /mcp, /ui, ...) needs: a
request id (``X-Request-ID`` in and out, also on a 500, and on its log line), the guards of
api.http.guards (local mode: loopback client, ``Host`` and ``Origin``; body content types; the API key
checked before the body is read), the body size limit, the
headers of api.http.security_headers (no framing; the explorer's content policy), metrics per route template and one
structured access-log line."""

from __future__ import annotations

import logging
import re
import time

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import KeyRing
from api.errors import PayloadTooLargeError
from api.http.error_handling import error_response
from api.http.guards import BODY_METHODS, refusal
from api.http.metrics import Metrics
from api.http.security_headers import add_security_headers
from api.logs import request_id_from, request_id_var

access_log = logging.getLogger("epimem.access")
log = logging.getLogger("epimem.api")


# An import takes back whatever an export wrote, a restore what a backup wrote: their bodies stream to the
# route under their own cap.
IMPORT_PATH = re.compile(r"^/v1/(groups/[^/]+/import|restore)/?$")


class _TooLarge(Exception):
    def __init__(self, limit: int, setting: str = "max_body_bytes") -> None:
        super().__init__(limit)
        self.limit = limit
        self.setting = setting


class RequestMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        keys: KeyRing | None = None,
        max_import_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.max_import_bytes = max_import_bytes if max_import_bytes is not None else max_body_bytes
        self.keys = keys if keys is not None else KeyRing([])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and refusal(scope, Headers(scope=scope), self.keys) is not None:
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request_id = request_id_from(headers.get("x-request-id"))
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                MutableHeaders(scope=message)["X-Request-ID"] = request_id
                add_security_headers(message, scope.get("path", ""))
            await send(message)

        try:
            if self.keys.enabled and scope["method"] in BODY_METHODS:
                # Off the event loop: the first check of a secret on this server hashes it (scrypt, ~0.1 s).
                refused = await run_in_threadpool(refusal, scope, headers, self.keys)
            else:
                refused = refusal(scope, headers, self.keys)
            if refused is not None:
                await refused(scope, receive, send_with_id)
                return
            try:
                if scope["method"] == "POST" and IMPORT_PATH.match(scope.get("path", "")):
                    body = self._counted(headers, receive, self.max_import_bytes)
                else:
                    body = await self._read_body(headers, receive)
                await self._call(scope, body, send_with_id, request_id)
            except _TooLarge as too_large:
                await _too_large(too_large.limit, too_large.setting)(scope, receive, send_with_id)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            elapsed = time.perf_counter() - started
            self.metrics.observe(scope["method"], template, status, elapsed)
            access_log.info(
                "%s %s %d",
                scope["method"],
                template,
                status,
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "route": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
            request_id_var.reset(token)

    async def _call(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        """The app; an error nothing else handled becomes a 500 that carries the request id, and its
        traceback is logged with that id (Starlette's own 500 would answer outside this middleware)."""
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unexpected error while handling a request", extra={"request_id": request_id})
            if started:  # the answer is half sent: the connection can only be closed
                raise
            response: Response = error_response(
                500, "internal_error", f"internal error; see the server log for request id {request_id}"
            )
            await response(scope, receive, send)

    def _counted(self, headers: Headers, receive: Receive, limit: int) -> Receive:
        """The body as it arrives (the route streams it), cut off with 413 past ``limit`` bytes."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _TooLarge(limit, "max_import_bytes")
        size = 0

        async def counting() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > limit:  # raised inside the route, answered 413 by its EpimemError handler
                raise PayloadTooLargeError(
                    f"an import body is at most {limit} bytes (EPIMEM_MAX_IMPORT_BYTES)",
                    details={"max_import_bytes": limit},
                )
            return message

        return counting

    async def _read_body(self, headers: Headers, receive: Receive) -> Receive:
        """Read the whole body up to the limit (Content-Length is checked but not trusted), then
        replay it to the app."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _TooLarge(self.max_body_bytes)
        chunks: list[bytes] = []
        size = 0
        more = True
        disconnect: Message | None = None
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnect = message
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge(self.max_body_bytes)
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if disconnect is not None and sent:
                return disconnect
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay


def _too_large(limit: int, setting: str) -> Response:
    return error_response(413, "payload_too_large", f"request body is larger than {limit} bytes", {setting: limit})
