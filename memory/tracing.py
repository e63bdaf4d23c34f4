"""Child spans for the stages that cost time, with OpenTelemetry when it is switched on
(``api.http.telemetry`` does that from the standard ``OTEL_*`` variables) and nothing at all otherwise:
with tracing off, ``span`` is a shared null context and ``traced`` one ``is None`` check.

Attributes describe sizes and costs only: never message text, keys or raw group ids
(``group_hash`` gives a stable, non-reversible label when one is useful).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
Attributes = dict[str, str | int | float | bool]

_tracer: Any = None  # an opentelemetry Tracer while tracing is on


class Span:
    """What a stage can add to its span once it knows the result (tokens used, pieces, ...)."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, **attributes: str | int | float | bool | None) -> None:
        if self._span is not None:
            self._span.set_attributes({f"epimem.{k}": v for k, v in attributes.items() if v is not None})


_OFF = Span()


def enable(tracer_provider: Any) -> None:
    """Send spans to ``tracer_provider`` (an OpenTelemetry ``TracerProvider``)."""
    global _tracer
    _tracer = tracer_provider.get_tracer("epimem")


def disable() -> None:
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


def group_hash(group_id: str) -> str:
    return hashlib.sha256(group_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@contextmanager
def span(name: str, **attributes: str | int | float | bool | None) -> Iterator[Span]:
    tracer = _tracer
    if tracer is None:
        yield _OFF
        return
    clean = {f"epimem.{k}": v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(name, attributes=clean) as current:
        yield Span(current)


def traced(
    name: str,
    before: Callable[..., dict[str, Any]] | None = None,
    after: Callable[[Any], dict[str, Any]] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A span around every call of the decorated function; ``before(*args, **kwargs)`` and
    ``after(result)`` give its attributes."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if _tracer is None:
                return function(*args, **kwargs)
            with span(name, **(before(*args, **kwargs) if before else {})) as current:
                result = function(*args, **kwargs)
                if after is not None:
                    current.set(**after(result))
                return result

        return wrapper

    return decorate
