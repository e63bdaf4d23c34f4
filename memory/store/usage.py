"""Usage counters shared by the epimem servers of one deployment (``epm-usage``): messages per day of a key
or a group, stored characters of a group.

Chroma has no atomic increment, so no server ever adds to another's number: each process writes its own
key in a counter's record, ``n.<generation>.<its run id>``, set to what it counted (an upsert merges keys,
so writers never overwrite each other and need no read-modify-write). A counter's value is its ``base``
plus the keys of its current generation. A recount (the stored characters of a group, measured from its
log after a deletion) writes a new base under a new generation: the keys of older generations no longer
count, and a process learns of the new generation when it next reads the counter (every write reads
first) and counts on under it what it had not written yet. Writes that race a recount can be counted
twice or lost, by at most what a process counts between two writes, until the next recount. A process's
key outlives it, so the sum survives restarts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memory.store import codec
from memory.store.calls import StorePart, store_call
from memory.store.parts import RecordCollection

USAGE = "epm-usage"
NODE_PREFIX = "n."
FIRST_GENERATION = "0"


@dataclass(frozen=True)
class CounterId:
    """``measure``: messages or chars; ``kind``: key or group; ``period``: a UTC day (YYYY-MM-DD) or "all"."""

    measure: str
    kind: str
    subject: str
    period: str

    @property
    def record_id(self) -> str:
        return codec.digest(self.measure, self.kind, self.subject, self.period)[:40]

    def labels(self) -> dict[str, str]:
        return {"measure": self.measure, "kind": self.kind, "subject": self.subject, "period": self.period}


@dataclass(frozen=True)
class CounterValue:
    generation: str = FIRST_GENERATION  # never recounted while it is the first
    base: int = 0
    counted: int = 0  # every process's keys of this generation
    exists: bool = False
    mine: int = 0  # the reading process's own key of this generation (part of ``counted``)

    @property
    def total(self) -> int:
        return self.base + self.counted


class UsageStore(StorePart):
    """The ``UsageRecords`` seam over Chroma."""

    def _collection(self) -> RecordCollection:
        collection = self._collections.open(USAGE, metadata={"epimem": "usage"})
        assert collection is not None
        return collection

    @property
    def run_id(self) -> str:
        return self.connection.run_id

    @store_call
    def read(self, counters: Iterable[CounterId]) -> dict[CounterId, CounterValue]:
        wanted = {counter.record_id: counter for counter in counters}
        if not wanted:
            return {}
        found = self._collection().get(ids=list(wanted), include=["metadatas"])
        values = dict.fromkeys(wanted.values(), CounterValue())
        for record_id, metadata in zip(found["ids"], found["metadatas"] or [], strict=True):
            values[wanted[record_id]] = _value(dict(metadata or {}), self.run_id)
        return values

    @store_call
    def period(self, period: str) -> dict[CounterId, CounterValue]:
        """Every counter of a period (a day, or "all"), for the usage listings."""
        found = self._collection().get(where={"period": period}, include=["metadatas"])
        values = {}
        for metadata in found["metadatas"] or []:
            meta = dict(metadata or {})
            counter = CounterId(str(meta["measure"]), str(meta["kind"]), str(meta["subject"]), str(meta["period"]))
            values[counter] = _value(meta)
        return values

    @store_call
    def write(self, counts: dict[CounterId, tuple[str, int]]) -> None:
        """This process's count of each counter under the generation it counted in (one call)."""
        if not counts:
            return
        counters = list(counts)
        metadatas: list[Any] = [
            {**counter.labels(), node_key(counts[counter][0], self.run_id): counts[counter][1]} for counter in counters
        ]
        self._collection().upsert(
            ids=[counter.record_id for counter in counters],
            metadatas=metadatas,
            embeddings=codec.placeholders(len(counters)),
        )

    @store_call
    def stored_chars(self, group_id: str) -> int:
        """Characters of the messages a group's log holds now (what a recount measures)."""
        log = self._collections.log(group_id, create=False)
        if log is None:
            return 0
        return sum(len(text) for _, text, _ in self._collections.rows(log, where={"kind": "message"}))

    @store_call
    def rebase(self, counter: CounterId, base: int) -> str:
        """Set the counter to ``base`` under a new generation (a recount); returns the generation. The keys
        of older generations are removed (they count no more)."""
        collection = self._collection()
        found = collection.get(ids=[counter.record_id], include=["metadatas"])
        old = dict((found["metadatas"] or [{}])[0] or {}) if found["ids"] else {}
        generation = uuid.uuid4().hex[:8]
        metadata: dict[str, Any] = {**counter.labels(), "generation": generation, "base": int(base)}
        metadata.update({key: None for key in old if key.startswith(NODE_PREFIX)})
        collection.upsert(ids=[counter.record_id], metadatas=[metadata], embeddings=codec.placeholders(1))
        return generation


def node_key(generation: str, run_id: str) -> str:
    return f"{NODE_PREFIX}{generation}.{run_id}"


def _value(metadata: dict[str, Any], run_id: str = "") -> CounterValue:
    generation = str(metadata.get("generation", FIRST_GENERATION))
    prefix = f"{NODE_PREFIX}{generation}."
    counted = sum(int(v) for k, v in metadata.items() if k.startswith(prefix) and isinstance(v, int | float))
    mine = metadata.get(node_key(generation, run_id)) if run_id else None
    return CounterValue(
        generation=generation,
        base=int(metadata.get("base", 0)),
        counted=counted,
        exists=True,
        mine=int(mine) if isinstance(mine, int | float) else 0,
    )
