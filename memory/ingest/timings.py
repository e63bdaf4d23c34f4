"""Seconds per ingest stage, shared by the caller and the ordered writer's thread (exported as metrics)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from memory.tracing import span


@dataclass
class StageTimings:
    """Cumulative seconds per ingest stage (exported as metrics)."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    episodes_created: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def snapshot(self) -> StageTimings:
        with self._lock:
            return StageTimings(seconds=dict(self.seconds), episodes_created=self.episodes_created)

    def count_episodes(self, count: int) -> None:
        with self._lock:
            self.episodes_created += count

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Seconds spent in a stage; stages run in the writer thread overlap those of the caller."""
        started = time.perf_counter()
        try:
            with span(f"epimem.ingest.{name}"):
                yield
        finally:
            with self._lock:
                self.seconds[name] += time.perf_counter() - started
