"""Episode formation off the request path: one background thread drains a queue of sessions."""

from __future__ import annotations

import logging
import queue
import threading

from memory.errors import EpimemError
from memory.ingest.ingestor import Ingestor

log = logging.getLogger("epimem.worker")

_STOP = ("", "")


class FormationWorker:
    """Forms the closed segments of sessions whose pending messages reached the threshold.

    A failed formation leaves the messages pending (they are retried by the next trigger, a
    flush or a restart); it never loses them.
    """

    def __init__(self, ingestor: Ingestor, *, scan_interval_s: float = 0.0) -> None:
        self._ingestor = ingestor
        # Every so often, finish sessions left unfinished (e.g. by another server that died).
        self._scan_interval = scan_interval_s or None
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue()
        self._queued: set[tuple[str, str]] = set()
        self._guard = threading.Lock()
        self._idle = threading.Condition(self._guard)
        self._busy = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="epimem-formation", daemon=True)
        self._thread.start()

    def submit(self, group_id: str, session_id: str) -> None:
        key = (group_id, session_id)
        with self._guard:
            if key in self._queued:
                return
            self._queued.add(key)
            self._busy += 1
        self._queue.put(key)

    def pending(self) -> list[tuple[str, str]]:
        with self._guard:
            return sorted(self._queued)

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while True:
            try:
                key: tuple[str, str] | None = self._queue.get(timeout=self._scan_interval)
            except queue.Empty:
                key = None
                with self._guard:
                    self._busy += 1
            if key == _STOP:
                return
            with self._guard:
                if key is not None:
                    self._queued.discard(key)
            try:
                if key is None:
                    self._ingestor.recover()
                else:
                    self._ingestor.form_closed(*key)
            except EpimemError as error:
                self.failures += 1
                log.warning("episode formation for a session failed and stays pending: %s", error.message)
            except Exception:  # noqa: BLE001 - the worker thread must survive; the error is logged with its trace
                self.failures += 1
                log.exception("episode formation crashed; the messages stay pending")
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
