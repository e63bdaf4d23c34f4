"""This server's side of the shared usage counters (``memory.store.usage``): what it counted, written
out in one call at most every ``refresh_s`` seconds (and at close), and the others' counts read back
when a limit needs the total and the last read is older than that.

So a total is exact for this server's own counts and at most ``refresh_s`` behind the other servers'
(0 = read and write at every check: exact, two store calls per checked request). A crash loses what
was counted since the last write: the figure then errs low.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memory.store.protocols import UsageRecords
from memory.store.usage import FIRST_GENERATION, CounterId, CounterValue


@dataclass
class _State:
    generation: str = FIRST_GENERATION
    others: int = 0  # base + every other process's count, as last read
    own: int = 0  # this process's count under ``generation``
    written: int = 0  # what of ``own`` the store holds
    read_at: float | None = None  # monotonic time of the last read (None: never)
    measured: bool = False  # a recount set its base (only counters that are recounted need one)
    recount_due: bool = False  # this process changed what it measures other than by counting (a deletion)


class SharedCounters:
    def __init__(self, records: UsageRecords, *, refresh_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._records = records
        self.refresh_s = refresh_s
        self._clock = clock
        self._states: dict[CounterId, _State] = {}
        self._lock = threading.Lock()

    def add(self, counter: CounterId, amount: int) -> None:
        """Count ``amount`` (negative: give back what a reservation took); written at the next flush."""
        with self._lock:
            self._states.setdefault(counter, _State()).own += amount

    def totals(self, counters: Iterable[CounterId], *, measure: Callable[[CounterId], int] | None = None) -> dict:
        """Each counter's total. Counters not read for ``refresh_s`` are read again (after this process's
        counts are written). ``measure``: how to recount a counter never recounted (stored characters)."""
        wanted = list(dict.fromkeys(counters))
        now = self._clock()
        with self._lock:
            stale = [c for c in wanted if _stale(self._states.get(c), now, self.refresh_s)]
        if stale:
            self.flush()  # reads the counters it writes
            with self._lock:
                stale = [c for c in stale if _stale(self._states.get(c), now, self.refresh_s)]
            if stale:
                self._read(stale, now)
        if measure is not None:
            for counter in wanted:
                with self._lock:
                    state = self._states[counter]
                    due = state.recount_due or not state.measured
                if due:
                    self.recount(counter, measure(counter))
        with self._lock:
            return {c: self._states[c].others + self._states[c].own for c in wanted}

    def recount(self, counter: CounterId, value: int) -> None:
        """Set the counter to a measured value for every server (a new generation)."""
        generation = self._records.rebase(counter, value)
        with self._lock:
            self._states[counter] = _State(generation=generation, others=value, read_at=self._clock(), measured=True)

    def forget(self, counter: CounterId) -> None:
        """Recount it (a deletion changed what it measures): at the next total, or by ``recount_due``."""
        with self._lock:
            self._states.setdefault(counter, _State()).recount_due = True

    def due(self) -> list[CounterId]:
        """The counters waiting for a recount."""
        with self._lock:
            return [counter for counter, state in self._states.items() if state.recount_due]

    def flush(self) -> None:
        """Write this process's counts that the store does not hold yet: the counters are read first (a recount
        elsewhere may have started a new generation: the counts are written under it), then written (two
        calls for all of them)."""
        with self._lock:
            changed = [c for c, s in self._states.items() if s.own != s.written]
        if not changed:
            return
        self._read(changed, self._clock())
        with self._lock:
            dirty = {c: (self._states[c].generation, self._states[c].own) for c in changed}
        self._records.write(dirty)
        with self._lock:
            for counter, (generation, own) in dirty.items():
                state = self._states[counter]
                if state.generation == generation:
                    state.written = own

    def period(self, period: str) -> dict[CounterId, int]:
        """Every counter of a period, as every server has counted it (this one's counts written first)."""
        self.flush()
        return {counter: value.total for counter, value in self._records.period(period).items()}

    def _read(self, counters: list[CounterId], now: float) -> None:
        values = self._records.read(counters)
        with self._lock:
            for counter in counters:
                self._merge(counter, values.get(counter, CounterValue()), now)

    def _merge(self, counter: CounterId, value: CounterValue, now: float) -> None:
        state = self._states.setdefault(counter, _State())
        if value.generation != state.generation:
            # A recount by another process: what this one wrote before is in its base (or raced it: lost);
            # what it has not written yet counts on, under the new generation (or, had it landed before the
            # recount read the log, twice: at most one recheck's worth of adds, until the next recount).
            state.generation, state.own, state.written = value.generation, state.own - state.written, 0
            state.measured = value.generation != FIRST_GENERATION
        elif value.generation != FIRST_GENERATION:
            state.measured = True
        # The rest of the total is the others': what the store holds under this process's own key is taken
        # from the record read, not from ``written``, which a flush running beside this read may not have
        # set yet (its write landed: counting it from both would show this process's count twice).
        state.others = value.total - value.mine
        state.read_at = now


def _stale(state: _State | None, now: float, refresh_s: float) -> bool:
    return state is None or state.read_at is None or now - state.read_at >= refresh_s
