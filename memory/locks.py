"""The locks of one process: a readers-writer lock per key, and a plain lock per session.

``ReadersWriterLock`` is the one readers-writer lock of epimem: the store's connection uses it to let
many store calls run while an engine restart waits for them (one key), the memory service to let
many adds of a group run while a delete of that group waits for them (a key per group). A waiting
exclusive holder blocks new shared holders of its key, so a steady stream of shared holders never
starves it. It is not re-entrant: a thread that holds a key (in either mode) must not take it again.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager


class ReadersWriterLock:
    """Per key (a group id; "" where there is only one thing to guard): many shared holders, or one
    exclusive holder."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._shared: dict[str, int] = defaultdict(int)
        self._exclusive: set[str] = set()
        self._waiting: dict[str, int] = defaultdict(int)

    @contextmanager
    def shared(self, key: str = "") -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: key not in self._exclusive and not self._waiting.get(key))
            self._shared[key] += 1
        try:
            yield
        finally:
            with self._condition:
                self._shared[key] -= 1
                if not self._shared[key]:
                    del self._shared[key]
                self._condition.notify_all()

    @contextmanager
    def exclusive(self, key: str = "") -> Iterator[None]:
        with self._condition:
            self._waiting[key] += 1
            try:
                self._condition.wait_for(lambda: key not in self._exclusive and not self._shared.get(key))
            finally:
                self._waiting[key] -= 1
                if not self._waiting[key]:
                    del self._waiting[key]
            self._exclusive.add(key)
        try:
            yield
        finally:
            with self._condition:
                self._exclusive.discard(key)
                self._condition.notify_all()

    @contextmanager
    def exclusive_all(self, keys: Iterable[str]) -> Iterator[None]:
        """Several keys exclusively, taken in sorted order (two callers cannot deadlock)."""
        with ExitStack() as stack:
            for key in sorted(set(keys)):
                stack.enter_context(self.exclusive(key))
            yield


SessionKey = tuple[str, str]  # (group id, session id)


class SessionLocks:
    """One plain lock per (group, session), created on first use; several are taken in sorted order."""

    def __init__(self) -> None:
        self._locks: dict[SessionKey, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, key: SessionKey) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    @contextmanager
    def hold(self, keys: Iterable[SessionKey]) -> Iterator[None]:
        with ExitStack() as stack:
            for key in sorted(set(keys)):
                stack.enter_context(self.lock(key))
            yield
