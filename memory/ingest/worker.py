"""Episode formation off the request path: one background thread drains a queue of sessions, and
closes the sessions that went quiet.

Idle sessions: every add arms the session's timer (``touch``); when it runs out (``idle`` after the
newest arrival this process saw), the session is formed — the ingestor closes the open tail only if
no message of it arrived within ``idle``, by the arrival times in the log, so another server's newer
message keeps it open, and the timer is armed again from the newest arrival. With several servers
each one arms its own timers; the formation lease (memory.ingest.coordination) makes one of them
form and none twice. After a restart, ``watch`` arms the timers of every session left pending.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections.abc import Iterable

from memory.background import background_thread
from memory.errors import EpimemError
from memory.ingest.ingestor import Ingestor
from memory.timeutil import utc_now

log = logging.getLogger("epimem.worker")

_STOP = ("", "")
_WAKE = ("", "wake")  # a timer was armed: the loop recomputes how long it may wait
Key = tuple[str, str]


class FormationWorker:
    """Forms the closed segments of sessions whose pending messages reached the threshold, and the
    whole pending stretch of sessions that went idle.

    A failed formation leaves the messages pending (they are retried by the next trigger, a
    flush, the idle timer or a restart); it never loses them.
    """

    def __init__(self, ingestor: Ingestor, *, scan_interval_s: float = 0.0, idle_s: float | None = None) -> None:
        self._ingestor = ingestor
        # Every so often, finish sessions left unfinished (e.g. by another server that died).
        self._scan_interval = scan_interval_s or None
        self._idle_s = idle_s
        self._queue: queue.Queue[Key] = queue.Queue()
        self._queued: set[Key] = set()
        self._guard = threading.Lock()
        self._idle = threading.Condition(self._guard)
        self._busy = 0
        self._deadlines: dict[Key, float] = {}  # session -> monotonic time its idle timer runs out
        self._timers: list[tuple[float, Key]] = []  # heap of (deadline, session); stale entries skipped
        self._next_scan = time.monotonic() + (self._scan_interval or 0.0)
        self.failures = 0
        self._thread = background_thread(self._run, name="epimem-formation", lower=False)  # memory.background: why
        self._thread.start()

    def submit(self, group_id: str, session_id: str) -> None:
        key = (group_id, session_id)
        with self._guard:
            if key in self._queued:
                return
            self._queued.add(key)
            self._busy += 1
        self._queue.put(key)

    def touch(self, group_id: str, session_id: str, *, after_s: float | None = None) -> None:
        """(Re)arm the session's idle timer: it runs out ``after_s`` from now (default: ``idle``)."""
        if self._idle_s is None:
            return
        deadline = time.monotonic() + (self._idle_s if after_s is None else max(0.0, after_s))
        with self._guard:
            self._deadlines[(group_id, session_id)] = deadline
            heapq.heappush(self._timers, (deadline, (group_id, session_id)))
        self._queue.put(_WAKE)

    def watch(self, sessions: Iterable[Key]) -> None:
        """Arm the idle timers of sessions with pending messages, from their newest arrival (at start)."""
        if self._idle_s is None:
            return
        for group_id, session_id in sessions:
            self._rearm(group_id, session_id)

    def watched(self) -> list[Key]:
        """Sessions whose idle timer is armed."""
        with self._guard:
            return sorted(self._deadlines)

    def pending(self) -> list[Key]:
        with self._guard:
            return sorted(self._queued)

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout=timeout)

    # -- the loop ------------------------------------------------------------------------------------

    def _rearm(self, group_id: str, session_id: str) -> None:
        """Arm the timer from the newest pending arrival in the log, or disarm when nothing is pending."""
        assert self._idle_s is not None
        newest = self._ingestor.newest_pending_arrival(group_id, session_id)
        key = (group_id, session_id)
        if newest is None:
            with self._guard:
                self._deadlines.pop(key, None)
            return
        self.touch(group_id, session_id, after_s=self._idle_s - (utc_now() - newest).total_seconds())

    def _due(self) -> list[Key]:
        """Sessions whose idle timer ran out (disarmed: forming them arms them again if needed)."""
        now = time.monotonic()
        due: list[Key] = []
        with self._guard:
            while self._timers and self._timers[0][0] <= now:
                deadline, key = heapq.heappop(self._timers)
                if self._deadlines.get(key) == deadline:
                    del self._deadlines[key]
                    due.append(key)
        return due

    def _wait_s(self) -> float | None:
        """Seconds until the next timer or scan (None: nothing to wait for but the queue)."""
        now = time.monotonic()
        with self._guard:
            waits = [self._timers[0][0] - now] if self._timers else []
        if self._scan_interval is not None:
            waits.append(self._next_scan - now)
        return max(0.0, min(waits)) if waits else None

    def _run(self) -> None:
        while True:
            try:
                key = self._queue.get(timeout=self._wait_s())
            except queue.Empty:
                key = _WAKE
            if key == _STOP:
                return
            if key != _WAKE:
                with self._guard:
                    self._queued.discard(key)
                self._work(key, counted=True)
            for due in self._due():
                self._work(due)
            if self._scan_interval is not None and time.monotonic() >= self._next_scan:
                self._next_scan = time.monotonic() + self._scan_interval
                self._work(None)

    def _work(self, key: Key | None, *, counted: bool = False) -> None:
        """Form one session's closed segments (None: every unfinished session); ``counted``: the
        queue already counted it as busy."""
        if not counted:
            with self._guard:
                self._busy += 1
        try:
            if key is None:
                self._ingestor.recover()
            else:
                self._ingestor.form_closed(*key)
                if self._idle_s is not None:
                    self._rearm(*key)  # what is still pending closes once it goes quiet
        except EpimemError as error:
            self.failures += 1
            log.warning("episode formation for a session failed and stays pending: %s", error.message)
            self._retry_later(key)
        except Exception:  # noqa: BLE001 - the worker thread must survive; the error is logged with its trace
            self.failures += 1
            log.exception("episode formation crashed; the messages stay pending")
            self._retry_later(key)
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _retry_later(self, key: Key | None) -> None:
        if key is not None:
            self.touch(*key)  # tried again when the idle timer runs out
