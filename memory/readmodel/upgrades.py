"""The second step of a big group's read (memory.readmodel.build): a background thread per group
reads what a deferred snapshot left out (unit vectors, messages, metadata), page by page, each page a
store call of its own, and hands the result to the cache (``SnapshotCache.install_upgrade``), which
brings it forward with the writes that landed meanwhile or drops it."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import chromadb.errors
import httpx

from memory.errors import EpimemError
from memory.readmodel.build import ReadCancelled
from memory.readmodel.snapshot import GroupSnapshot

log = logging.getLogger(__name__)
ATTEMPTS = 3  # reads of one group before its snapshot is left deferred (until the group is read again)


class Upgrades:
    """``read(group_id, cancelled)``: the group read whole (each page in a store call of its own);
    ``install(snapshot)``: True once it replaced the deferred one (inside a store call, ``call``);
    ``deferred(group_id)``: whether the cached snapshot still waits for it."""

    def __init__(
        self,
        read: Callable[[str, Callable[[], bool]], GroupSnapshot],
        install: Callable[[GroupSnapshot], bool],
        deferred: Callable[[str], bool],
        call: Callable[[], contextlib.AbstractContextManager[object]],
    ) -> None:
        self._read, self._install, self._deferred, self._call = read, install, deferred, call
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._stopping = False

    def start(self, group_id: str) -> None:
        """Read the group whole in the background (once at a time per group)."""
        with self._lock:
            if self._stopping or group_id in self._threads:
                return
            thread = threading.Thread(target=self._run, args=(group_id,), name="epimem-snapshot-read", daemon=True)
            self._threads[group_id] = thread
        thread.start()

    def wait(self, timeout: float | None = None) -> None:
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)

    def stop(self) -> None:
        """Stop every background read at its next page and wait for it (the cache is closing)."""
        with self._lock:
            self._stopping = True
        self.wait()

    def _run(self, group_id: str) -> None:
        try:
            for _ in range(ATTEMPTS):
                upgraded = self._read(group_id, lambda: self._stopping)
                with self._call():
                    if self._stopping or self._install(upgraded) or not self._deferred(group_id):
                        return
        except ReadCancelled:
            return
        except (httpx.TransportError, ConnectionError, TimeoutError, chromadb.errors.ChromaError, EpimemError) as error:
            # The group stays readable from its columns (each request reads what it needs from Chroma)
            # until it is next read from Chroma.
            log.warning("reading group %r whole in the background failed: %s", group_id, error)
        finally:
            with self._lock:
                self._threads.pop(group_id, None)
