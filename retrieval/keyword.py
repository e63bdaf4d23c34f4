"""The keyword side of hybrid search: BM25 (bm25s) over a group's records, with English stemming.

Stemming (PyStemmer, the Snowball stemmer bm25s is built for) lets "painting" find "painted";
stopwords are dropped so question words ("what", "when") carry no weight.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from memory.store.records import VectorRecord

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
    """BM25 over every record of a group (episodes, summaries and messages)."""

    def __init__(self, records: list[VectorRecord]) -> None:
        self.records = records
        self.positions = {record.id: position for position, record in enumerate(records)}
        # Scope filters are array operations, not a Python loop over every matching record.
        self._sessions = np.array([record.session_id for record in records], dtype=object)
        self._times = np.array([record.timestamp for record in records], dtype=np.float64)
        self._bm25 = _bm25s().BM25()
        if records:
            self._bm25.index(tokenize([keyword_text(record) for record in records]), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        tokens = tokenize([query])[0]
        if not tokens or not self.records:
            return np.zeros(len(self.records), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)

    def top(
        self,
        query: str,
        *,
        depth: int,
        session_ids: Collection[str] | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> list[tuple[VectorRecord, float]]:
        """The ``depth`` best records with a positive score, best first, of the given sessions and
        with an epoch timestamp in [start, end)."""
        scores = self.scores(query)
        keep = scores > 0
        if session_ids is not None:
            keep &= np.isin(self._sessions, list(session_ids))
        if start is not None:
            keep &= self._times >= start
        if end is not None:
            keep &= self._times < end
        positions = np.flatnonzero(keep)
        ordered = positions[np.argsort(-scores[positions], kind="stable")][:depth]
        return [(self.records[int(position)], float(scores[position])) for position in ordered]


class KeywordCache:
    """One KeywordIndex per group, LRU over groups, rebuilt only when the group's records change.

    The key is (number of vectors in the group's index, local generation): the count is one cheap
    call per query whatever the group's size, and the generation is bumped by ``forget`` whenever
    this process deletes or rewrites records (a delete followed by as many adds keeps the count).
    """

    def __init__(self, *, capacity: int = 32) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._generation: dict[str, int] = {}
        # group -> ((count, generation), index); tests read it to check what is cached.
        self.entries: OrderedDict[str, tuple[tuple[int, int], KeywordIndex]] = OrderedDict()
        self.builds = 0

    def get(self, group_id: str, count: int, load: Callable[[], list[VectorRecord]]) -> KeywordIndex:
        with self._lock:
            key = (count, self._generation.get(group_id, 0))
            cached = self.entries.get(group_id)
            if cached is not None and cached[0] == key:
                self.entries.move_to_end(group_id)
                return cached[1]
        index = KeywordIndex(load())
        with self._lock:
            if key[1] == self._generation.get(group_id, 0):  # not invalidated while building
                self.entries[group_id] = (key, index)
                self.entries.move_to_end(group_id)
                self.builds += 1
                while len(self.entries) > self._capacity:
                    self.entries.popitem(last=False)
        return index

    def forget(self, group_id: str) -> None:
        with self._lock:
            self._generation[group_id] = self._generation.get(group_id, 0) + 1
            self.entries.pop(group_id, None)
