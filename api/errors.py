"""Errors only the HTTP surface raises: a missing or unknown key, a key that may not do this, a body
too large, a limit reached, and the client's own "no server answered". They share the root ``EpimemError`` (and its one
error shape) with the domain's errors, and are defined with them in ``epimem_client.errors``."""

from __future__ import annotations

from epimem_client.errors import (
    ForbiddenError,
    PayloadTooLargeError,
    ServerUnreachableError,
    TooManyRequestsError,
    UnauthorizedError,
)

__all__ = [
    "ForbiddenError",
    "PayloadTooLargeError",
    "ServerUnreachableError",
    "TooManyRequestsError",
    "UnauthorizedError",
]
