"""Requests per second, per server: a token bucket per subject (a key, a group) that holds at most one
second of its rate (at least one request) and refills continuously.

Per server on purpose: sharing a per-second count across servers would cost a store write and read on
every request (Chroma has no atomic increment) — more than the limit protects. Behind a balancer over N
servers a key can make up to N times its rate; set the limit to the deployment's rate divided by N.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

Subject = tuple[str, str]  # ("key", key id) or ("group", group id)
MAX_SUBJECTS = 100_000  # buckets kept; full ones (idle for a second or more) are dropped first


class RateLimiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # seconds, monotonic (tests move it)
        self._buckets: dict[Subject, tuple[float, float]] = {}  # subject -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, wanted: Sequence[tuple[Subject, float]]) -> tuple[int, float] | None:
        """One request against each (subject, rate): taken from every bucket, or from none. Returns None
        when admitted, else the index of the first subject out of tokens and the seconds until it has one."""
        now = self.clock()
        with self._lock:
            levels = [self._level(subject, rate, now) for subject, rate in wanted]
            for index, ((_, rate), tokens) in enumerate(zip(wanted, levels, strict=True)):
                if tokens < 1.0:
                    for (subject, _), level in zip(wanted, levels, strict=True):
                        self._buckets[subject] = (level, now)
                    return index, (1.0 - tokens) / rate
            for (subject, _), tokens in zip(wanted, levels, strict=True):
                self._buckets[subject] = (tokens - 1.0, now)
            if len(self._buckets) > MAX_SUBJECTS:
                self._prune(now)
        return None

    def _level(self, subject: Subject, rate: float, now: float) -> float:
        capacity = max(1.0, rate)
        tokens, at = self._buckets.get(subject, (capacity, now))
        return min(capacity, tokens + max(0.0, now - at) * rate)

    def _prune(self, now: float) -> None:
        idle = [subject for subject, (_, at) in self._buckets.items() if now - at >= 1.0]
        for subject in idle[: max(len(idle), len(self._buckets) - MAX_SUBJECTS)]:
            del self._buckets[subject]
