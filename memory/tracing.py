"""Child spans for the stages that cost time, with OpenTelemetry when it is switched on
(``api.http.telemetry`` does that from the standard ``OTEL_*`` variables) and nothing at all otherwise:
with tracing off, ``span`` is a shared null context and ``traced`` one ``is None`` check.

Attributes describe sizes and costs only: never message text, keys or raw group ids
(``group_hash`` gives a stable, non-reversible label when one is useful).

The operations on memory (``memory_operation``) follow OpenTelemetry's GenAI memory conventions, so that
tools that know them read epimem's traces: a span named by ``gen_ai.operation.name`` (``create_memory``,
``search_memory``, ``update_memory``, ``delete_memory``, ``delete_memory_store``), with
``gen_ai.provider.name`` = ``epimem``, ``gen_ai.memory.store.id`` = the group's hash (a store is a group;
never its raw id), ``gen_ai.memory.record.id`` where one record is meant (an episode's uuid, or a
message's hashed id: message ids are the caller's), ``gen_ai.memory.record.count``, ``error.type`` on a
failure, and ``gen_ai.memory.query.text`` only when the operator opted in (``enable(query_text=True)``).
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
_query_text = False  # gen_ai.memory.query.text is recorded (an operator's opt-in)
PROVIDER = "epimem"
QUERY_TEXT = "gen_ai.memory.query.text"
STORE_ID = "gen_ai.memory.store.id"
RECORD_ID = "gen_ai.memory.record.id"
RECORD_COUNT = "gen_ai.memory.record.count"


class Span:
    """What a stage can add to its span once it knows the result (tokens used, pieces, ...)."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, **attributes: str | int | float | bool | None) -> None:
        if self._span is not None:
            self._span.set_attributes({f"epimem.{k}": v for k, v in attributes.items() if v is not None})


_OFF = Span()


def enable(tracer_provider: Any, *, query_text: bool = False) -> None:
    """Send spans to ``tracer_provider`` (an OpenTelemetry ``TracerProvider``); ``query_text``: put the text of
    searches in their spans (``gen_ai.memory.query.text``, off by default: a query may hold personal data)."""
    global _tracer, _query_text
    _tracer = tracer_provider.get_tracer("epimem")
    _query_text = query_text


def disable() -> None:
    global _tracer, _query_text
    _tracer = None
    _query_text = False


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


def memory_operation(
    operation: str, before: Callable[..., dict[str, Any]], after: Callable[[Any], dict[str, Any]] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A GenAI memory span (see the module's doc) around every call; ``before(*args, **kwargs)`` and
    ``after(result)`` give its ``gen_ai.*`` attributes (a query's text is dropped unless opted in)."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            tracer = _tracer
            if tracer is None:
                return function(*args, **kwargs)
            attributes = {"gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER}
            attributes.update({k: v for k, v in before(*args, **kwargs).items() if v is not None})
            if not _query_text:
                attributes.pop(QUERY_TEXT, None)
            with tracer.start_as_current_span(operation, attributes=attributes) as current:
                try:
                    result = function(*args, **kwargs)
                except Exception as error:
                    current.set_attribute("error.type", str(getattr(error, "code", "") or type(error).__qualname__))
                    raise
                if after is not None:
                    current.set_attributes({k: v for k, v in after(result).items() if v is not None})
                return result

        return wrapper

    return decorate


def on_group(_owner: Any, group_id: str, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
    """``before`` of an operation on a whole group (its store)."""
    return {STORE_ID: group_hash(group_id)}


def on_query(_owner: Any, group_id: str, query: Any, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
    """``before`` of a search: the store, and the query's text (kept only when opted in)."""
    text = query if isinstance(query, str) else getattr(query, "query", None)
    return {STORE_ID: group_hash(group_id), QUERY_TEXT: text}


def on_messages(_owner: Any, group_id: str, _session_id: str, messages: Any, *_args: Any, **_kw: Any) -> dict[str, Any]:
    """``before`` of an add: the store and how many messages it asks to create."""
    return {STORE_ID: group_hash(group_id), RECORD_COUNT: len(messages) if hasattr(messages, "__len__") else None}


def on_episode(_owner: Any, group_id: str, _session_id: str, episode_id: str, *_a: Any, **_k: Any) -> dict[str, Any]:
    """``before`` of an operation on one episode (its uuid is epimem's own id, not the caller's)."""
    return {STORE_ID: group_hash(group_id), RECORD_ID: episode_id, RECORD_COUNT: 1}


def on_message(_owner: Any, group_id: str, _session_id: str, message_id: str, *_a: Any, **_k: Any) -> dict[str, Any]:
    """``before`` of an operation on one message: its id is the caller's, so it is hashed like a group's."""
    return {STORE_ID: group_hash(group_id), RECORD_ID: f"message-{group_hash(message_id)}", RECORD_COUNT: 1}


def returned(hits: Any) -> dict[str, Any]:
    """``after`` of a search: the records it returned."""
    return {RECORD_COUNT: len(hits)}


def cited(result: Any) -> dict[str, Any]:
    """``after`` of a context: the records it cites."""
    return {RECORD_COUNT: len(result.citations)}


def removed(receipt: Any) -> dict[str, Any]:
    """``after`` of a deletion: the messages, episodes and summaries it removed."""
    return {RECORD_COUNT: len(receipt.messages) + len(receipt.episodes) + len(receipt.summaries)}
