"""Reaching a Chroma deployment: a ``chroma run`` server, a distributed Chroma or Chroma Cloud, one code path.

What differs between them is settings: host, port and TLS; the tenant and the database; a token, sent in a
header (``x-chroma-token`` by default: Chroma Cloud's, and what a token-checking proxy in front of a Chroma
server usually reads; Chroma 1.x servers have no authentication of their own). At start the tenant and the
database are looked up, and created when missing and the deployment allows it; anything that stops the start
(no answer, the token refused, a tenant or database missing that cannot be created) is one
``StoreUnavailableError`` that names the cause and the setting to look at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import chromadb
import httpx
from chromadb.api import AdminAPI, ClientAPI
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT
from chromadb.config import Settings as ChromaSettings

from memory.errors import StoreUnavailableError

AUTH_ERRORS = (chromadb.errors.ChromaAuthError, chromadb.errors.AuthorizationError)
DEFAULT_TOKEN_HEADER = "x-chroma-token"


@dataclass(frozen=True)
class Deployment:
    """Where a Chroma deployment answers and how epimem signs in (``EPIMEM_CHROMA_*``)."""

    host: str
    port: int = 8000
    ssl: bool = False
    tenant: str = DEFAULT_TENANT
    database: str = DEFAULT_DATABASE
    token: str | None = None
    token_header: str = DEFAULT_TOKEN_HEADER
    timeout_s: float = 10.0

    @property
    def where(self) -> str:
        scheme = "https" if self.ssl else "http"
        return f"{scheme}://{self.host}:{self.port} (tenant {self.tenant!r}, database {self.database!r})"

    @property
    def headers(self) -> dict[str, str] | None:
        return {self.token_header: self.token} if self.token else None

    def settings(self) -> ChromaSettings:
        """chromadb's settings for this deployment (a fresh object: chromadb's constructors change theirs)."""
        return ChromaSettings(
            anonymized_telemetry=False,
            chroma_api_impl="chromadb.api.fastapi.FastAPI",
            chroma_server_host=self.host,
            chroma_server_http_port=self.port,
            chroma_server_ssl_enabled=self.ssl,
            chroma_server_headers=self.headers,
        )

    def refused(self, error: Exception) -> StoreUnavailableError:
        said = f"the token in {self.token_header}" if self.token else "a request without a token"
        fix = "check EPIMEM_CHROMA_TOKEN" if self.token else "set EPIMEM_CHROMA_TOKEN"
        return StoreUnavailableError(
            f"the Chroma deployment at {self.where} refused {said} ({error}): {fix} "
            f"(and EPIMEM_CHROMA_TOKEN_HEADER if it reads another header)"
        )


def connect(deployment: Deployment) -> ClientAPI:
    """A client of the deployment's tenant and database, after making sure both exist (the start's checks)."""
    try:
        ensure_database(chromadb.AdminClient(deployment.settings()), deployment)
        client = chromadb.HttpClient(
            host=deployment.host,
            port=deployment.port,
            ssl=deployment.ssl,
            headers=deployment.headers,
            settings=ChromaSettings(anonymized_telemetry=False),
            tenant=deployment.tenant,
            database=deployment.database,
        )
    except AUTH_ERRORS as error:
        raise deployment.refused(error) from error
    except httpx.HTTPStatusError as error:  # an answer chromadb does not know as one of its errors
        if error.response.status_code in (401, 403):
            raise deployment.refused(error) from error
        raise StoreUnavailableError(f"the Chroma deployment at {deployment.where} answered {error}") from error
    except (httpx.TransportError, ConnectionError) as error:
        raise StoreUnavailableError(f"cannot reach the Chroma deployment at {deployment.where}: {error}") from error
    # chromadb's HTTP session has no timeout at all: a hung server would hang every request.
    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(deployment.timeout_s, connect=min(deployment.timeout_s, 3.0))
    return client


def ensure_database(admin: AdminAPI, deployment: Deployment) -> None:
    """The deployment's tenant and database, each created if it is missing; an error naming the one that is
    missing and could not be created."""
    try:
        admin.get_tenant(deployment.tenant)
    except chromadb.errors.NotFoundError:
        _create(lambda: admin.create_tenant(deployment.tenant), f"tenant {deployment.tenant!r}", deployment)
    try:
        admin.get_database(deployment.database, tenant=deployment.tenant)
    except chromadb.errors.NotFoundError:
        what = f"database {deployment.database!r} of tenant {deployment.tenant!r}"
        _create(lambda: admin.create_database(deployment.database, tenant=deployment.tenant), what, deployment)


def _create(create: Callable[[], object], what: str, deployment: Deployment) -> None:
    try:
        create()
    except chromadb.errors.UniqueConstraintError:
        return  # another server created it meanwhile
    except (chromadb.errors.ChromaError, ValueError) as error:
        raise StoreUnavailableError(
            f"the {what} does not exist at {deployment.where} and could not be created ({error}): create it, "
            "or set EPIMEM_CHROMA_TENANT / EPIMEM_CHROMA_DATABASE to ones that exist"
        ) from error
