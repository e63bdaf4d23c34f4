"""A token-checking reverse proxy in front of a Chroma server, as deployments put one (Chroma 1.x servers have
no authentication of their own; Chroma Cloud checks ``x-chroma-token``). Every request must carry the token
in the header; one without it, or with another token, is answered 401 in Chroma's error shape (``AuthError``)
and never reaches Chroma; the others are forwarded as they are and answered with Chroma's response.

Run as a process (``python token_proxy.py --port P --upstream http://127.0.0.1:C --token T``) by
``TokenProxy``; it counts the requests it forwarded and refused (``GET /__proxy/counts``, no token needed) and
takes another token (``POST /__proxy/token``: a token revoked). ``--no-create``: a deployment whose tokens may
not create tenants or databases (such a request is answered 403, ``AuthorizationError``).
Standard library only: one thread per client connection (HTTP/1.1 keep-alive), one upstream connection per
thread.
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}
COUNTS_PATH = "/__proxy/counts"
TOKEN_PATH = "/__proxy/token"


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, upstream: str, header: str, token: str, *, no_create: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.header, self.token, self.no_create = header.lower(), token, no_create
        self.counts = {"forwarded": 0, "refused": 0}
        self.lock = threading.Lock()
        self.local = threading.local()

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: no delayed-ACK stall between
    server: _Proxy

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path == COUNTS_PATH:
            with self.server.lock:
                answer = json.dumps(self.server.counts).encode()
            self._answer(200, answer, [("Content-Type", "application/json")])
            return
        if self.path == TOKEN_PATH and self.command == "POST":
            self.server.token = body.decode()
            self._answer(200, b"", [])
            return
        if self.headers.get(self.server.header) != self.server.token:
            self.server.count("refused")
            said = "missing" if self.headers.get(self.server.header) is None else "wrong"
            error = {"error": "AuthError", "message": f"{said} token in {self.server.header}"}
            self._answer(401, json.dumps(error).encode(), [("Content-Type", "application/json")])
            return
        if self.server.no_create and self.command == "POST" and _creates_tenant_or_database(self.path):
            self.server.count("refused")
            error = {"error": "AuthorizationError", "message": "this token may not create tenants or databases"}
            self._answer(403, json.dumps(error).encode(), [("Content-Type", "application/json")])
            return
        self.server.count("forwarded")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        status, reason, answer_headers, answer = self._forward(body, headers)
        self.send_response(status, reason)
        for name, value in answer_headers:
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """The request sent upstream on this thread's connection (opened again once if Chroma closed it)."""
        for attempt in range(2):
            connection = getattr(self.server.local, "connection", None)
            if connection is None:
                connection = http.client.HTTPConnection(*self.server.upstream, timeout=120)
                connection.connect()
                connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.server.local.connection = connection
            try:
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                return response.status, response.reason, response.getheaders(), response.read()
            except (ConnectionError, http.client.HTTPException):
                connection.close()
                self.server.local.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle  # noqa: N815


def _creates_tenant_or_database(path: str) -> bool:
    parts = urlsplit(path).path.rstrip("/").split("/")  # /api/v2/tenants[/<tenant>/databases]
    return parts[-1] in ("tenants", "databases")


class TokenProxy:
    """The proxy as a process on a free port of 127.0.0.1, in front of ``upstream``."""

    def __init__(
        self,
        upstream: str,
        token: str,
        *,
        header: str = "x-chroma-token",
        no_create: bool = False,
        log: Path | None = None,
    ) -> None:
        from helpers.servers import free_port

        self.upstream, self.token, self.header, self.log = upstream, token, header, log
        self.no_create = no_create
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> TokenProxy:
        import httpx

        output = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - lives with the process
        command = [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port)]
        command += ["--upstream", self.upstream, "--token", self.token, "--header", self.header]
        command += ["--no-create"] if self.no_create else []
        self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1) as polls:  # one client for every poll: a client costs ~20 ms of CPU to make
            while True:
                assert self.process.poll() is None, f"the token proxy exited with {self.process.returncode}"
                try:
                    polls.get(self.url + COUNTS_PATH)
                    return self
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the token proxy did not start"
                    time.sleep(0.05)

    def counts(self) -> dict[str, int]:
        import httpx

        return dict(httpx.get(self.url + COUNTS_PATH, timeout=5).json())

    def revoke(self, new_token: str) -> None:
        """From now on only ``new_token`` passes."""
        import httpx

        httpx.post(self.url + TOKEN_PATH, content=new_token.encode(), timeout=5).raise_for_status()
        self.token = new_token

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


TEST_TENANT = "epimem-tests"
TEST_DATABASE = "storage-suite"


class ChromaDeployment:
    """How the tests reach a Chroma server: through a ``TokenProxy`` with a token, tenant and database of their
    own, or directly (``proxy`` None: the default tenant and database, no token)."""

    def __init__(self, port: int, *, proxy: TokenProxy | None = None, tenant: str, database: str) -> None:
        self.server_port, self.proxy, self.tenant, self.database = port, proxy, tenant, database

    @classmethod
    def proxied(cls, server_port: int, *, log: Path | None = None) -> ChromaDeployment:
        token = f"tok-{secrets.token_hex(12)}"
        proxy = TokenProxy(f"http://127.0.0.1:{server_port}", token, log=log).start()
        return cls(server_port, proxy=proxy, tenant=TEST_TENANT, database=TEST_DATABASE)

    @classmethod
    def direct(cls, server_port: int) -> ChromaDeployment:
        return cls(server_port, tenant="default_tenant", database="default_database")

    @property
    def port(self) -> int:
        return self.proxy.port if self.proxy is not None else self.server_port

    def settings(self, **overrides: object) -> dict[str, object]:
        """``Settings`` keywords that reach this deployment."""
        values: dict[str, object] = {
            "chroma_host": "127.0.0.1",
            "chroma_port": self.port,
            "chroma_tenant": self.tenant,
            "chroma_database": self.database,
        }
        if self.proxy is not None:
            values["chroma_token"] = self.proxy.token
        return {**values, **overrides}

    def environment(self) -> dict[str, str]:
        """The same as ``EPIMEM_*`` variables (for servers started as processes)."""
        return {f"EPIMEM_{key.upper()}": str(value) for key, value in self.settings().items()}

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--header", default="x-chroma-token")
    parser.add_argument("--no-create", action="store_true")
    args = parser.parse_args()
    _Proxy(args.port, args.upstream, args.header, args.token, no_create=args.no_create).serve_forever()


if __name__ == "__main__":
    main()
