"""The keyword side of hybrid search: BM25 (bm25s) over a group's records, with English stemming.

Stemming (PyStemmer, the Snowball stemmer bm25s is built for) lets "painting" find "painted";
stopwords are dropped so question words ("what", "when") carry no weight.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Collection, Iterable

import numpy as np

from memory.readmodel.patch import Patch
from memory.readmodel.reader import Columns, Derivation, GroupReader
from memory.store.records import VectorRecord
from retrieval.bm25 import Postings, tokenize

__all__ = ["KEYWORDS", "KeywordIndex", "keyword_index", "keyword_text", "tokenize"]


def keyword_text(record: VectorRecord) -> str:
    """What BM25 reads for a record: its title (episodes), its speaker and its text."""
    return f"{record.title} {record.producer_id} {record.document}"


def _text(snapshot: Columns, position: int) -> str:
    """``keyword_text`` of a record, from the snapshot's columns."""
    return f"{snapshot.titles[position]} {snapshot.producers[position]} {snapshot.documents[position]}"


def _texts(snapshot: Columns, positions: Iterable[int]) -> list[str]:
    return [_text(snapshot, position) for position in positions]


class KeywordIndex:
    """BM25 over every record of a group (episodes, summaries and messages), in the order of the group's
    read snapshot (memory.readmodel.snapshot).

    The same scores as bm25s's (Lucene variant, k1 1.5, b 0.75; tests/retrieval/test_keyword_patches.py
    compares them), computed per query from postings instead of from a precomputed score matrix: a
    matrix depends on the document count and the average length, so every write would change all of
    it, while postings (one entry per record and distinct token: record position, token, count) change
    only where records do. A snapshot patched with what writes changed (memory.readmodel.patch)
    gets its index by ``patched``: the rows of unchanged records kept and renumbered, only new or
    rewritten texts tokenized.
    """

    QUERIES_KEPT = 16  # a request scores one query several times (candidates, message evidence)
    K1 = 1.5
    B = 0.75

    def __init__(self, snapshot: Columns, *, postings: Postings | None = None) -> None:
        # Held weakly: the snapshot keeps this index (``derived``), and a cycle between them left every
        # replaced snapshot of a written group to the garbage collector, whose young collections then
        # walked each one's columns and messages (a big group: ~100 ms pauses every few writes).
        self._snapshot_ref = weakref.ref(snapshot)
        self.positions = snapshot.positions
        # Scope filters are array operations over the snapshot's columns, never a loop over records.
        self._sessions = snapshot.session_codes
        self._times = snapshot.timestamps
        self._size = len(snapshot)
        self._scores: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._postings = postings if postings is not None else Postings.of(_texts(snapshot, range(self._size)))
        self.is_patched = postings is not None

    def patched(self, snapshot: Columns, patch: Patch, previous: Columns) -> KeywordIndex:
        """This index for ``snapshot``, patched from ``previous`` (this index's snapshot) by ``patch``
        (memory.readmodel.patch.Patch): only the texts of new and rewritten records are read."""
        old_of_new: np.ndarray = patch.old_of_new
        stale = np.flatnonzero(old_of_new < 0)
        rewritten = [int(p) for p in patch.rewritten if _text(snapshot, int(p)) != _text(previous, int(old_of_new[p]))]
        moved = old_of_new.copy()
        moved[rewritten] = -1
        retokenized = np.union1d(stale, np.asarray(rewritten, dtype=np.int64)).astype(np.int64)
        postings = self._postings.renumbered(moved, len(snapshot))
        if len(postings.docs) < len(self._postings.docs):  # records removed or rewritten: their tokens go
            postings = postings.compacted()
        postings = postings.with_texts(retokenized, _texts(snapshot, retokenized.tolist()))
        return KeywordIndex(snapshot, postings=postings)

    def arrays(self) -> dict[str, np.ndarray]:
        """What is kept on disk with the group (memory.readmodel.files): the postings."""
        return self._postings.arrays()

    @property
    def records(self) -> list[VectorRecord]:
        """Every record indexed, in index order (built on demand: the index itself holds columns)."""
        return [self._snapshot.record(position) for position in range(self._size)]

    def record(self, position: int) -> VectorRecord:
        return self._snapshot.record(position)

    @property
    def _snapshot(self) -> Columns:
        snapshot = self._snapshot_ref()
        if snapshot is None:  # callers read an index through the snapshot they hold
            raise RuntimeError("the keyword index outlived its snapshot")
        return snapshot

    @property
    def nbytes(self) -> int:
        """Bytes held by the postings and the vocabulary, estimated."""
        return self._postings.nbytes

    def scores(self, query: str) -> np.ndarray:
        with self._lock:
            kept = self._scores.get(query)
            if kept is not None:
                self._scores.move_to_end(query)
                return kept
        tokens = tokenize([query])[0]
        found = self._postings.scores(tokens, k1=self.K1, b=self.B)
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


class Keywords(Derivation[KeywordIndex]):
    """The keyword index of a group, kept with its version in the read model: built from scratch, or patched
    from the previous version's when the group was (``KeywordIndex.patched``), and kept on disk with it."""

    key = "keyword-index"

    def build(self, group: GroupReader) -> KeywordIndex:
        return KeywordIndex(group.columns)

    def size(self, value: KeywordIndex) -> int:
        return value.nbytes

    def patched(self, value: KeywordIndex, columns: Columns, patch: Patch, previous: Columns) -> KeywordIndex:
        return value.patched(columns, patch, previous)

    def saved(self, value: KeywordIndex) -> dict[str, np.ndarray]:
        return value.arrays()

    def restored(self, columns: Columns, arrays: dict[str, np.ndarray]) -> KeywordIndex:
        return KeywordIndex(columns, postings=Postings.restore(arrays))


KEYWORDS = Keywords()


def keyword_index(group: GroupReader) -> KeywordIndex:
    """The group's BM25 index; built once per version of the group's records, never per query."""
    return group.derived(KEYWORDS)
