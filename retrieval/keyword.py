"""The keyword side of hybrid search: BM25 (bm25s) over a group's records, with English stemming.

Stemming (PyStemmer, the Snowball stemmer bm25s is built for) lets "painting" find "painted";
stopwords are dropped so question words ("what", "when") carry no weight.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.store.records import VectorRecord

if TYPE_CHECKING:
    from memory.store.group_snapshot import GroupSnapshot
    from memory.store.snapshots import SnapshotCache

_STEM_LOCK = threading.Lock()  # PyStemmer objects are not thread-safe


@functools.cache
def _bm25s() -> Any:
    """bm25s (and scipy under it) on first use: commands that search nothing never import it."""
    import bm25s

    return bm25s


@functools.cache
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def _stem(words: list[str]) -> list[str]:
    with _STEM_LOCK:
        return list(_stemmer().stemWords(words))


def tokenize(texts: list[str]) -> list[list[str]]:
    return list(_bm25s().tokenize(texts, stopwords="en", stemmer=_stem, return_ids=False, show_progress=False))


def keyword_text(record: VectorRecord) -> str:
    """What BM25 reads for a record: its title (episodes), its speaker and its text."""
    return f"{record.title} {record.producer_id} {record.document}"


class KeywordIndex:
    """BM25 over every record of a group (episodes, summaries and messages), built from the group's
    read snapshot (memory.store.snapshots) in its stored order."""

    QUERIES_KEPT = 16  # a request scores one query several times (candidates, message evidence)

    def __init__(self, snapshot: GroupSnapshot) -> None:
        self._snapshot = snapshot
        self.positions = snapshot.positions
        # Scope filters are array operations over the snapshot's columns, never a loop over records.
        self._sessions = snapshot.session_codes
        self._times = snapshot.timestamps
        self._bm25 = _bm25s().BM25()
        self._size = len(snapshot)
        self._scores: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        if self._size:
            texts = [
                f"{title} {producer} {document}"  # keyword_text of each record, from the columns
                for title, producer, document in zip(
                    snapshot.titles, snapshot.producers, snapshot.documents, strict=True
                )
            ]
            self._bm25.index(tokenize(texts), show_progress=False)

    @property
    def records(self) -> list[VectorRecord]:
        """Every record indexed, in index order (built on demand: the index itself holds columns)."""
        return [self._snapshot.record(position) for position in range(self._size)]

    def record(self, position: int) -> VectorRecord:
        return self._snapshot.record(position)

    @property
    def nbytes(self) -> int:
        """Bytes held by the BM25 index (its score matrix and vocabulary), estimated."""
        held = sum(getattr(part, "nbytes", 0) for part in (getattr(self._bm25, "scores", None) or {}).values())
        return held + 100 * len(getattr(self._bm25, "vocab_dict", None) or {})

    def scores(self, query: str) -> np.ndarray:
        with self._lock:
            kept = self._scores.get(query)
            if kept is not None:
                self._scores.move_to_end(query)
                return kept
        tokens = tokenize([query])[0]
        if not tokens or not self._size:
            found = np.zeros(self._size, dtype=np.float32)
        else:
            found = np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)
        found.setflags(write=False)  # shared between the calls of a request
        with self._lock:
            self._scores[query] = found
            while len(self._scores) > self.QUERIES_KEPT:
                self._scores.popitem(last=False)
        return found

    def top(
        self,
        query: str,
        *,
        depth: int,
        session_ids: Collection[str] | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> list[tuple[VectorRecord, float]]:
        """The ``depth`` best records with a positive score, best first (ties: index order), of the
        given sessions and with an epoch timestamp in [start, end)."""
        scores = self.scores(query)
        keep = scores > 0
        if session_ids is not None:
            index = self._snapshot.session_index
            codes = [index[s] for s in session_ids if s in index]
            keep &= np.isin(self._sessions, np.asarray(codes, dtype=np.int32))
        if start is not None:
            keep &= self._times >= start
        if end is not None:
            keep &= self._times < end
        positions = np.flatnonzero(keep)
        if len(positions) > 4 * depth:  # the best ``depth`` without sorting every match
            kept = scores[positions]
            threshold = -np.partition(-kept, depth - 1)[depth - 1]
            above = positions[kept > threshold]
            tied = positions[kept == threshold][: depth - len(above)]
            positions = np.sort(np.concatenate([above, tied]))
        ordered = positions[np.argsort(-scores[positions], kind="stable")][:depth]
        return [(self._snapshot.record(int(position)), float(scores[position])) for position in ordered]


class KeywordCache:
    """The keyword index of each group, kept with the group's read snapshot (memory.store.snapshots):
    built once per version of the group's records, dropped with the snapshot (LRU over groups within
    the read cache's byte bound, or when this process changes the group: ``forget``)."""

    KEY = "keyword-index"

    def __init__(self, snapshots: SnapshotCache | None = None) -> None:
        self._snapshots = snapshots
        self._lock = threading.Lock()
        self.builds = 0

    def get(self, snapshot: GroupSnapshot) -> KeywordIndex:
        def build() -> KeywordIndex:
            with self._lock:
                self.builds += 1
            return KeywordIndex(snapshot)

        built = not snapshot.has(self.KEY)
        index: KeywordIndex = snapshot.derived(self.KEY, build, size=lambda found: found.nbytes)
        if built and self._snapshots is not None:
            self._snapshots.trim()  # the snapshot grew by its index: apply the bounds again
        return index

    @property
    def entries(self) -> dict[str, tuple[Any, KeywordIndex]]:
        """group -> (version, index) of every cached group whose index is built (tests read it)."""
        if self._snapshots is None:
            return {}
        found = {}
        for group_id in self._snapshots.groups():
            snapshot = self._snapshots.cached(group_id)
            if snapshot is not None and snapshot.has(self.KEY):
                found[group_id] = (snapshot.version, snapshot.derived(self.KEY, lambda: None))
        return found

    def forget(self, group_id: str) -> None:
        if self._snapshots is not None:
            self._snapshots.forget(group_id)
