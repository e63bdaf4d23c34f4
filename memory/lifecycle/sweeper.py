"""The background retention sweep: every ``interval_s`` (first at start), each group with a retention
policy is swept (memory.upkeep: ``sweep_retention``). A group whose sweep fails is logged and tried
again at the next round; the others are swept. With several servers each one sweeps: the formation
locks (leases) a sweep holds make them take turns per session, and the second finds nothing left.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from memory.background import background_thread
from memory.errors import EpimemError
from memory.lifecycle.retention import RetentionReceipt

log = logging.getLogger("epimem.retention")


class RetentionSweeper:
    def __init__(
        self,
        *,
        groups: Callable[[], Iterable[str]],
        sweep: Callable[[str], RetentionReceipt],
        interval_s: float,
    ) -> None:
        self._groups = groups
        self._sweep = sweep
        self._interval = interval_s
        self._stop = threading.Event()
        self.rounds = 0
        self.failures = 0
        self._thread = background_thread(self._run, name="epimem-retention")
        self._thread.start()

    def run_once(self) -> list[RetentionReceipt]:
        receipts = []
        for group_id in list(self._groups()):
            try:
                receipts.append(self._sweep(group_id))
            except EpimemError as error:
                self.failures += 1
                log.warning("retention sweep of a group failed; tried again next round: %s", error.message)
        self.rounds += 1
        return receipts

    def close(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except EpimemError as error:  # the group list could not be read
                self.failures += 1
                log.warning("retention sweep round failed: %s", error.message)
            except Exception:  # noqa: BLE001 - the sweeper must survive; logged with its trace
                self.failures += 1
                log.exception("retention sweep round crashed")
            self._stop.wait(self._interval)
