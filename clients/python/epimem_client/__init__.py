"""The thin Python client of an epimem server: the ``epimem-client`` distribution (``pip install ./clients/python``
from a clone), ``import epimem_client``.
It needs pydantic and httpx only, and imports nothing of the server."""

from epimem_client.client import AsyncEpimemClient, EpimemClient
from epimem_client.errors import (
    ConflictError,
    EpimemError,
    ForbiddenError,
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    ServerUnreachableError,
    StoreUnavailableError,
    UnauthorizedError,
)
from epimem_client.models import (
    AddReceipt,
    AuditEntry,
    AuditPage,
    Citation,
    ContextResult,
    DeletionReceipt,
    Episode,
    GroupConfiguration,
    ImportReceipt,
    Message,
    RedactionReceipt,
    Revision,
    ScoreComponents,
    SearchHit,
    SessionInfo,
    TimelinePage,
)

__all__ = [
    "AddReceipt",
    "AsyncEpimemClient",
    "AuditEntry",
    "AuditPage",
    "Citation",
    "ConflictError",
    "ContextResult",
    "DeletionReceipt",
    "EpimemClient",
    "EpimemError",
    "Episode",
    "ForbiddenError",
    "GroupConfiguration",
    "ImportReceipt",
    "InvalidInputError",
    "Message",
    "NotFoundError",
    "PayloadTooLargeError",
    "RedactionReceipt",
    "Revision",
    "ScoreComponents",
    "SearchHit",
    "ServerUnreachableError",
    "SessionInfo",
    "StoreUnavailableError",
    "TimelinePage",
    "UnauthorizedError",
]
