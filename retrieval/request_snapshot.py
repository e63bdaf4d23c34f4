"""One version of a group for a whole read. A search or a context reads the group's snapshot several times
(candidates, their episodes, the open episodes, the message rows); every one of those reads sees the version
the request began with. A formation that lands meanwhile (an episode written, then its messages' vectors moved
to it) is seen whole by the next request and not at all by this one, so a message found by this request
resolves to the episode its version holds: its session's open episode while it was still pending there."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar

from memory.store.group_snapshot import GroupSnapshot

_PINNED: ContextVar[dict[str, GroupSnapshot] | None] = ContextVar("epimem_request_snapshots", default=None)
Q = TypeVar("Q")
T = TypeVar("T")
S = TypeVar("S", bound="Snapshots")


class Snapshots(Protocol):
    def snapshot(self, group_id: str, *, fresh: bool = False) -> GroupSnapshot: ...


def pinned(group_id: str) -> GroupSnapshot | None:
    """The snapshot of the request under way in this context, if one holds the group."""
    held = _PINNED.get()
    return None if held is None else held.get(group_id)


@contextmanager
def reading(source: Snapshots, group_id: str) -> Iterator[None]:
    """Hold the group's current version (a Chroma server's stamp read now) for the reads inside."""
    if pinned(group_id) is not None:  # a read inside another: the outer one's version
        yield
        return
    snapshot = source.snapshot(group_id, fresh=True)
    token = _PINNED.set({**(_PINNED.get() or {}), group_id: snapshot})
    try:
        yield
    finally:
        _PINNED.reset(token)


def one_version(method: Callable[[S, str, Q], T]) -> Callable[[S, str, Q], T]:
    """A read method ``(self, group_id, query)`` of a ``Snapshots`` run inside ``reading``."""

    @functools.wraps(method)
    def read(self: S, group_id: str, query: Q) -> T:
        with reading(self, group_id):
            return method(self, group_id, query)

    return read
