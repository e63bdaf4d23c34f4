"""The error hierarchy of the wire protocol, defined once: every error has a stable ``code`` and the HTTP
status it travels with. The server raises these same classes (``memory.errors`` re-exports them), and the
client reads the server's ``{"error": {"code", "message", "details"}}`` back as the matching one."""

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


class PayloadTooLargeError(EpimemError):
    status_code = 413
    code = "payload_too_large"


class UnauthorizedError(EpimemError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(EpimemError):
    status_code = 403
    code = "forbidden"


class TooManyRequestsError(EpimemError):
    """Over a limit of the key or the group (requests per second, messages per day, stored characters):
    ``details["limit"]`` names it; retry after ``retry_after`` seconds."""

    status_code = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: int = 1, details: Any = None) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after


class ServerUnreachableError(EpimemError):
    """Raised by the client only: no epimem answered at its URL (refused, timed out, name not found)."""

    status_code = 503
    code = "server_unreachable"
