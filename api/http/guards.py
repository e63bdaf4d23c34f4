"""What every request must satisfy before its body is read (checked by api.http.middleware on every path).

- **Local mode** (no API keys configured): the service answers only this machine. The client must
  connect from a loopback address (so ``uvicorn --factory api.server:create_app --host 0.0.0.0`` does
  not serve the network), the ``Host`` header must be a loopback name (a DNS-rebinding page's host
  is not), and an ``Origin`` header, which browsers send on cross-origin requests, must be a
  loopback origin: a web page of another site cannot read or write a local epimem.
- **Body content types**: a request that may change state (POST, PUT, PATCH, DELETE) and declares
  a body type must declare JSON (``application/json``, parameters allowed, or ``*+json``), JSON
  Lines (``application/x-ndjson`` and its aliases) or, for a restore, ``application/gzip``.
  ``text/plain``, forms and multipart — what a web page can send without a CORS preflight — are
  refused with 415.
- **Keys first**: with keys configured, such a request without a valid key is refused with 401
  before a byte of its body is read (the routes still check each key's groups and role).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Scope

from api.auth import KeyRing
from api.errors import UnauthorizedError
from api.http.error_handling import error_response

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPES = frozenset(
    {"application/json", "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
)
BACKUP_TYPE = "application/gzip"  # a restore's body (a browser sends it only after a CORS preflight)
# Starlette's in-process TestClient: not a socket peer, so never a remote client.
_IN_PROCESS = ("testclient", "testserver")


def refusal(scope: Scope, headers: Headers, keys: KeyRing) -> Response | None:
    """The error response that refuses this request, or None to let it through."""
    if not keys.enabled:
        refused = _local_refusal(scope, headers)
        if refused is not None:
            return refused
    if scope.get("method", "GET") not in BODY_METHODS:
        return None
    refused = _content_type_refusal(headers.get("content-type"))
    if refused is not None or not keys.enabled:
        return refused
    try:
        keys.authenticate(headers)
    except UnauthorizedError as error:
        return error_response(error.status_code, error.code, error.message)
    return None


def is_loopback_host(name: str) -> bool:
    """A loopback host name or address: localhost, 127.0.0.0/8, ::1 (brackets and port stripped)."""
    host = name.strip().lower()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin.strip())
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and is_loopback_host(host)


def _local_refusal(scope: Scope, headers: Headers) -> Response | None:
    client = scope.get("client")
    in_process = client is not None and client[0] == _IN_PROCESS[0]
    if client is not None and not in_process and not is_loopback_host(str(client[0])):
        return _forbidden(
            "local mode (no API keys configured) serves only this machine; "
            "set EPIMEM_API_KEYS_FILE to serve other clients"
        )
    host = headers.get("host")
    if host is not None and not is_loopback_host(host) and not (in_process and host == _IN_PROCESS[1]):
        return _forbidden(
            "in local mode the Host header must be a loopback name (localhost, 127.0.0.1, [::1]); "
            "requests for other host names are refused (DNS rebinding)"
        )
    origin = headers.get("origin")
    if origin is not None and not is_loopback_origin(origin):
        return _forbidden("in local mode requests from web pages of other origins are refused")
    return None


def _content_type_refusal(declared: str | None) -> Response | None:
    if declared is None:
        return None  # no body type declared: not a browser form; the route reads what it expects
    media = declared.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES or media == BACKUP_TYPE or (media.startswith("application/") and media.endswith("+json")):
        return None
    return error_response(
        415,
        "unsupported_media_type",
        f"this request takes application/json (application/x-ndjson for an import), not {media or 'no type'!r}",
        {"content_type": media[:100]},
    )


def _forbidden(message: str) -> Response:
    return error_response(403, "forbidden", message)
