"""Errors only the HTTP surface raises: a missing or unknown key, a key that may not do this, a body
too large. They share the root ``EpimemError`` (and its one error shape) with the domain's errors."""

from __future__ import annotations

from memory.errors import EpimemError


class PayloadTooLargeError(EpimemError):
    status_code = 413
    code = "payload_too_large"


class UnauthorizedError(EpimemError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(EpimemError):
    status_code = 403
    code = "forbidden"


class ServerUnreachableError(EpimemError):
    """The client could not reach the epimem server (refused, timed out, name not found)."""

    status_code = 503
    code = "server_unreachable"
