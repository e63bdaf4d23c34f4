"""One root exception; every error knows its HTTP status and a stable code."""

from __future__ import annotations

from typing import Any


class EpimemError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidInputError(EpimemError, ValueError):
    status_code = 422
    code = "invalid_input"


class NotFoundError(EpimemError):
    status_code = 404
    code = "not_found"


class ConflictError(EpimemError):
    status_code = 409
    code = "conflict"


class ModelMismatchError(EpimemError):
    status_code = 409
    code = "embedding_model_mismatch"


class ModelNotFoundError(EpimemError):
    status_code = 500
    code = "embedding_model_missing"


class StoreUnavailableError(EpimemError):
    """The vector store cannot be reached; the caller may retry later."""

    status_code = 503
    code = "store_unavailable"

    def __init__(self, message: str, *, retry_after: int = 5, details: Any = None) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after
