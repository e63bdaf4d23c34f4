"""One HTTP client for the tests' own requests to real servers.

``httpx.get`` and its siblings build a client per call, and every client loads the CA bundle (~17 ms of CPU)
for TLS that no request here uses. ``HTTP`` is built once; it keeps no connection open between requests, so
each request opens its own connection as ``httpx.get`` does (a test that stops a server and starts another
on the same port meets no stale connection)."""

from __future__ import annotations

import httpx

HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
