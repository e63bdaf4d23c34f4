"""The second step of a big group's read (memory.readmodel.build): a background thread per group
reads what a deferred snapshot left out (unit vectors, messages, metadata), page by page, each page a
store call of its own, and hands the result to the read model (``ReadModel.install_upgrade``), which
brings it forward with the writes that landed meanwhile or drops it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from memory.background import background_thread
from memory.readmodel.build import ReadCancelled
from memory.readmodel.snapshot import GroupSnapshot
from memory.store.group_reads import READ_ERRORS

log = logging.getLogger(__name__)
ATTEMPTS = 3  # reads of one group before its snapshot is left deferred (until the group is read again)


class Upgrades:
    """``read(group_id, cancelled)``: the group read whole (each page in a store call of its own);
    ``install(snapshot)``: True once it replaced the deferred one;
    ``deferred(group_id)``: whether the cached snapshot still waits for it."""

    def __init__(
        self,
        read: Callable[[str, Callable[[], bool]], GroupSnapshot],
        install: Callable[[GroupSnapshot], bool],
        deferred: Callable[[str], bool],
    ) -> None:
        self._read, self._install, self._deferred = read, install, deferred
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._stopping = False

    def start(self, group_id: str) -> None:
        """Read the group whole in the background (once at a time per group)."""
        with self._lock:
            if self._stopping or group_id in self._threads:
                return
            thread = background_thread(self._run, args=(group_id,), name="epimem-snapshot-read")
            self._threads[group_id] = thread
        thread.start()

    def wait(self, timeout: float | None = None) -> None:
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)

    def stop(self) -> None:
        """Stop every background read at its next page and wait for it (the read model is closing)."""
        with self._lock:
            self._stopping = True
        self.wait()

    def _run(self, group_id: str) -> None:
        try:
            for _ in range(ATTEMPTS):
                upgraded = self._read(group_id, lambda: self._stopping)
                if self._stopping or self._install(upgraded) or not self._deferred(group_id):
                    return
        except ReadCancelled:
            return
        except READ_ERRORS as error:
            # The group stays readable from its columns (each request reads what it needs from the store)
            # until it is next read from Chroma.
            log.warning("reading group %r whole in the background failed: %s", group_id, error)
        finally:
            with self._lock:
                self._threads.pop(group_id, None)
