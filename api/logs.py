"""Structured JSON logs with a request id on every line logged while a request is handled.

Nothing here logs keys, headers or message content: only method, route template, status, timing
and the request id.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import uuid
from datetime import UTC, datetime

from memory.json_lines import one_line

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("epimem_request_id", default=None)

_GOOD_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_from(header: str | None) -> str:
    """Keep a caller's X-Request-ID when it is a sane token, otherwise mint one."""
    if header and _GOOD_REQUEST_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    _EXTRA = ("method", "route", "status", "duration_ms", "client")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for name in self._EXTRA:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return one_line(json.dumps(entry, ensure_ascii=False))


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for the epimem loggers and uvicorn's error log (its access log is
    replaced by ours, which carries the route template and request id); every other library's
    warnings (the MCP SDK's among them) in the same format, through the root logger."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("epimem", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("mcp").setLevel(logging.WARNING)  # its INFO line per request is not a server event
