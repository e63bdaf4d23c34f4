"""One address in front of several epimem servers: each request goes to the next server in turn (what a
round-robin load balancer does). A server that does not answer gives the client a 502, as a balancer would."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from helpers.servers import free_port

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "content-length", "host"}


class RoundRobin:
    def __init__(self, upstreams: Sequence[str]) -> None:
        self.upstreams = list(upstreams)
        self._turns = itertools.cycle(range(len(self.upstreams)))
        self._lock = threading.Lock()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.served: list[int] = []  # the upstream index of every forwarded request, in order
        self._client = httpx.Client(timeout=120)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def next_upstream(self) -> int:
        with self._lock:
            turn = next(self._turns)
            self.served.append(turn)
            return turn

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        balancer = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet: the test reads answers, not logs
                return

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                target = balancer.upstreams[balancer.next_upstream()] + self.path
                try:
                    answer = balancer._client.request(self.command, target, content=body, headers=headers)
                    status, content, answer_headers = answer.status_code, answer.content, answer.headers
                except httpx.TransportError as error:
                    status, content, answer_headers = 502, str(error).encode(), httpx.Headers()
                self.send_response(status)
                for key, value in answer_headers.items():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-encoding":
                        self.send_header(key, value)
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        return Forward

    def start(self) -> RoundRobin:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()
