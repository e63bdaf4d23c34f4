"""A webhook receiver for the tests: a stdlib HTTP server on 127.0.0.1 that checks each delivery's signature
with its own HMAC (not epimem's code), keeps what it received, and can go down (its port closed: every
delivery is refused) and come back on the same port."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from helpers.servers import free_port


@dataclass(frozen=True)
class Delivery:
    body: bytes
    event: dict[str, Any]
    timestamp: int
    headers: dict[str, str]


def valid_signature(secret: str, body: bytes, header: str) -> int | None:
    """The header's time when ``t=<seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` is right, else None."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    if "t" not in parts or "v1" not in parts or not parts["t"].isdigit():
        return None
    expected = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return int(parts["t"]) if hmac.compare_digest(expected, parts["v1"]) else None


class WebhookReceiver:
    def __init__(self, secret: str, *, status: int = 200) -> None:
        self.secret = secret
        self.status = status  # what it answers (e.g. 500 to make deliveries fail while it is up)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.received: list[Delivery] = []
        self.bad_signatures = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> WebhookReceiver:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                timestamp = valid_signature(receiver.secret, body, self.headers.get("x-epimem-signature", ""))
                with receiver._lock:
                    if timestamp is None:
                        receiver.bad_signatures += 1
                    elif receiver.status < 300:
                        headers = {k.lower(): v for k, v in self.headers.items()}
                        receiver.received.append(Delivery(body, json.loads(body), timestamp, headers))
                self.send_response(receiver.status if timestamp is not None else 401)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [delivery.event for delivery in self.received]

    def wait_for(
        self, condition: Callable[[list[dict[str, Any]]], bool], timeout: float = 60.0
    ) -> list[dict[str, Any]]:
        """The events once ``condition(events)`` holds (polled; the bound is generous, never a pass condition)."""
        deadline = time.monotonic() + timeout
        while not condition(events := self.events()):
            assert time.monotonic() < deadline, f"the receiver got {len(events)} events, not what was awaited"
            time.sleep(0.02)
        return events
