"""Headers that keep a browser from turning epimem's pages against their user.

Every response says it may not be framed (``frame-ancestors 'none'`` and ``X-Frame-Options:
DENY``): a page of another origin cannot show ``/ui`` in an invisible frame and have its user click
a delete (clickjacking). The explorer's files (``/ui``) also get a policy that allows only its own
scripts, styles and API calls — no inline script, no inline style attribute, no other origin — so an
injected ``<script>`` or ``style`` would not run. ``/docs`` and ``/redoc`` load FastAPI's page from a
CDN with an inline script, so they keep only the framing rule.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import Message

NO_FRAMING = "frame-ancestors 'none'"
EXPLORER_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        NO_FRAMING,
    ]
)
EXPLORER_PREFIX = "/ui"


def add_security_headers(message: Message, path: str) -> None:
    """Set the headers on an ``http.response.start`` message of a request for ``path``."""
    headers = MutableHeaders(scope=message)
    explorer = path == EXPLORER_PREFIX or path.startswith(EXPLORER_PREFIX + "/")
    headers["Content-Security-Policy"] = EXPLORER_POLICY if explorer else NO_FRAMING
    headers["X-Frame-Options"] = "DENY"
    headers["X-Content-Type-Options"] = "nosniff"
