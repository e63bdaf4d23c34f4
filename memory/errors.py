"""One root exception; every error knows its HTTP status and a stable code. The classes that travel over
the wire are defined once, in the thin client's ``epimem_client.errors`` (shipped with the server), so that
the server raises, and the client raises back, the very same classes."""

from __future__ import annotations

from epimem_client.errors import (
    ConflictError,
    EpimemError,
    ForbiddenError,
    InvalidInputError,
    ModelMismatchError,
    ModelNotFoundError,
    NotFoundError,
    PayloadTooLargeError,
    StoreUnavailableError,
)

__all__ = [
    "ConflictError",
    "EpimemError",
    "ForbiddenError",
    "InvalidInputError",
    "ModelMismatchError",
    "ModelNotFoundError",
    "NotFoundError",
    "PayloadTooLargeError",
    "StoreUnavailableError",
]
