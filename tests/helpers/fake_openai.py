"""A real local HTTP server that speaks the OpenAI chat-completions API, scriptable per request.

The only stand-in the tests use: everything between epimem and it (the `openai` package, HTTP,
timeouts, status codes) is real.

    with FakeOpenAI() as server:
        server.script(Reply(status=429), Reply(content={"title": "t", "content": "c"}))
        ... LLMClient(base_url=server.url, ...)

Scripted replies are served in order; when the script is empty, ``responder(request)`` answers
(by default: a plausible episode or segmentation built from the prompt itself).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_LINE = re.compile(r"^(?:\d+\. )?\[[^\]]+\] ([^:(]+?)(?: \(to [^)]*\))?: (.*)$")


# The longest a held reply waits for its release: a test that forgets to release it still ends.
HOLD_LIMIT_S = 600.0


@dataclass
class Reply:
    """One HTTP answer. ``content`` is the assistant message (a dict is sent as JSON text);
    ``body`` replaces the whole response body; ``delay`` is slept before answering. ``arrived`` is set when
    the request is received and ``hold`` waited for before answering: a test sees that a call is in flight and
    decides when it ends, whatever the machine's speed."""

    status: int = 200
    content: str | dict[str, Any] | None = None
    body: str | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] = (120, 40)
    arrived: threading.Event | None = None
    hold: threading.Event | None = None


def prompt_text(request: dict[str, Any]) -> str:
    return "\n".join(str(message.get("content", "")) for message in request.get("messages", []))


def is_segmentation(request: dict[str, Any]) -> bool:
    return "split a conversation into episodes" in prompt_text(request)


def conversation_lines(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(speaker, text) of every conversation line in the prompt."""
    found = []
    for line in prompt_text(request).splitlines():
        match = _LINE.match(line.strip())
        if match:
            found.append((match.group(1).strip(), match.group(2).strip()))
    return found


def episode_from_prompt(request: dict[str, Any]) -> Reply:
    """A faithful 'LLM' episode: third person, built from the conversation lines of the prompt."""
    lines = conversation_lines(request)
    speakers = sorted({speaker for speaker, _ in lines})
    content = " ".join(f"{speaker} said that {text.rstrip('.')}." for speaker, text in lines)
    return Reply(content={"title": f"LLM episode with {' and '.join(speakers)}", "content": content})


def segmentation_in_runs(size: int) -> Callable[[dict[str, Any]], Reply]:
    """Answers a segmentation request with consecutive runs of ``size`` messages."""

    def respond(request: dict[str, Any]) -> Reply:
        count = int(re.search(r"Numbered messages \(1 to (\d+)\)", prompt_text(request)).group(1))  # type: ignore[union-attr]
        episodes = [
            {"indices": list(range(start, min(start + size, count + 1))), "topic": f"topic {start}"}
            for start in range(1, count + 1, size)
        ]
        return Reply(content={"episodes": episodes})

    return respond


def default_responder(request: dict[str, Any]) -> Reply:
    return segmentation_in_runs(3)(request) if is_segmentation(request) else episode_from_prompt(request)


class FakeOpenAI:
    def __init__(self, responder: Callable[[dict[str, Any]], Reply] = default_responder) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def requests_of(self, kind: str) -> list[dict[str, Any]]:
        """Requests received, 'segment' or 'episode'."""
        with self._lock:
            received = list(self.requests)
        return [r for r in received if is_segmentation(r) == (kind == "segment")]

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            scripted = self._script.popleft() if self._script else None
        return scripted or self.responder(request)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass  # keep test output clean

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._send(404, json.dumps({"error": {"message": "not found", "type": "invalid_request_error"}}))
                    return
                reply = fake._next_reply(request)
                try:
                    if reply.arrived is not None:
                        reply.arrived.set()
                    if reply.hold is not None:
                        reply.hold.wait(HOLD_LIMIT_S)
                    if reply.delay:
                        time.sleep(reply.delay)
                    self._send(reply.status, self._body(reply, request), reply.headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing left to answer
                finally:
                    fake._done()

            def _body(self, reply: Reply, request: dict[str, Any]) -> str:
                if reply.body is not None:
                    return reply.body
                if reply.status != 200:
                    return json.dumps({"error": {"message": f"scripted {reply.status}", "type": "server_error"}})
                content = reply.content if not isinstance(reply.content, dict) else json.dumps(reply.content)
                return json.dumps(
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": request.get("model", "fake"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": reply.usage[0],
                            "completion_tokens": reply.usage[1],
                            "total_tokens": sum(reply.usage),
                        },
                    }
                )

            def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
