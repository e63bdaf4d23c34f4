"""BM25 postings that can be patched: one entry per (record, distinct token) with its count, and each
record's length, in the positions of a group's read snapshot (retrieval.keyword).

Tokens are bm25s's (its tokenizer, English stopwords, the Snowball stemmer) and the scores its Lucene
variant's, computed at query time from the postings of the query's tokens:
idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf part = tf / (k1 (1 - b + b len / avglen) + tf), float32
as bm25s computes them, each query token counted as often as it occurs in the query.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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


@dataclass(frozen=True)
class Postings:
    """``docs``/``tokens``/``counts``: one entry per record position and distinct token; ``lengths``:
    tokens per record. ``vocabulary`` (token -> id) grows and is shared along a patched lineage while
    records are only added; ``compacted`` gives a new one when records went."""

    vocabulary: dict[str, int]
    docs: np.ndarray  # int32
    tokens: np.ndarray  # int32
    counts: np.ndarray  # float32
    lengths: np.ndarray  # float32, one per record

    @classmethod
    def of(cls, texts: Sequence[str], vocabulary: dict[str, int] | None = None) -> Postings:
        vocabulary = {} if vocabulary is None else vocabulary
        docs, tokens, counts, lengths = _entries(texts, vocabulary)
        return cls(vocabulary, docs, tokens, counts, lengths)

    @property
    def nbytes(self) -> int:
        arrays = self.docs.nbytes + self.tokens.nbytes + self.counts.nbytes + self.lengths.nbytes
        return arrays + 100 * len(self.vocabulary)

    def renumbered(self, old_of_new: np.ndarray, size: int) -> Postings:
        """The entries of the records kept, at their new positions (``old_of_new[p]``: the old position
        of new record ``p``, -1 for a record whose entries go); the others have none (length 0) until
        ``with_texts`` fills them."""
        new_of_old = np.full(len(self.lengths), -1, dtype=np.int64)
        kept = np.flatnonzero(old_of_new >= 0)
        new_of_old[old_of_new[kept]] = kept
        moved = new_of_old[self.docs] if len(self.docs) else np.zeros(0, dtype=np.int64)
        keep = moved >= 0
        lengths = np.zeros(size, dtype=np.float32)
        lengths[kept] = self.lengths[old_of_new[kept]]
        return Postings(self.vocabulary, moved[keep].astype(np.int32), self.tokens[keep], self.counts[keep], lengths)

    def compacted(self) -> Postings:
        """These postings with a vocabulary of the tokens they hold only (after records were removed or
        rewritten: no token of a deleted text stays in memory)."""
        used = np.unique(self.tokens)
        remap = np.full(len(self.vocabulary), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        vocabulary = {token: int(remap[i]) for token, i in self.vocabulary.items() if remap[i] >= 0}
        return Postings(vocabulary, self.docs, remap[self.tokens].astype(np.int32), self.counts, self.lengths)

    def with_texts(self, positions: np.ndarray, texts: Sequence[str]) -> Postings:
        """These postings with the entries of ``texts`` at ``positions`` (records that have none)."""
        if not len(positions):
            return self
        docs, tokens, counts, lengths = _entries(texts, self.vocabulary)
        where = positions.astype(np.int32)
        lengths_all = self.lengths.copy()
        lengths_all[where] = lengths
        return Postings(
            self.vocabulary,
            np.concatenate([self.docs, where[docs]]),
            np.concatenate([self.tokens, tokens]),
            np.concatenate([self.counts, counts]),
            lengths_all,
        )

    def scores(self, query_tokens: list[str], *, k1: float, b: float) -> np.ndarray:
        """BM25 of every record for the query's tokens (float32, zeros where none matches)."""
        size = len(self.lengths)
        found = np.zeros(size, dtype=np.float32)
        ids = [self.vocabulary[token] for token in query_tokens if token in self.vocabulary]
        if not ids or not size:
            return found
        average = float(self.lengths.mean(dtype=np.float64)) or 1.0
        wanted = np.unique(np.asarray(ids, dtype=np.int32))
        matched = np.flatnonzero(np.isin(self.tokens, wanted))
        tokens = self.tokens[matched]
        parts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for token in ids:  # in the query's order, as bm25s adds them up
            if token not in parts:
                entries = matched[tokens == token]
                docs = self.docs[entries]
                idf = float(np.float32(math.log(1 + (size - len(entries) + 0.5) / (len(entries) + 0.5))))
                counts = self.counts[entries].astype(np.float64)
                norms = k1 * ((1 - b) + b * self.lengths[docs].astype(np.float64) / average)
                parts[token] = (docs, (idf * (counts / (norms + counts))).astype(np.float32))
            docs, part = parts[token]
            np.add.at(found, docs, part)
        return found


def _entries(texts: Sequence[str], vocabulary: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Postings of ``texts`` (docs numbered from 0), with their tokens added to ``vocabulary``."""
    lengths = np.zeros(len(texts), dtype=np.float32)
    if not texts:
        empty = np.zeros(0, dtype=np.int32)
        return empty, empty, np.zeros(0, dtype=np.float32), lengths
    tokenized = _bm25s().tokenize(list(texts), stopwords="en", stemmer=_stem, return_ids=True, show_progress=False)
    mapping = np.zeros(max(tokenized.vocab.values(), default=-1) + 1, dtype=np.int64)
    for token, local in tokenized.vocab.items():
        mapping[local] = vocabulary.setdefault(token, len(vocabulary))
    sizes = np.fromiter((len(ids) for ids in tokenized.ids), dtype=np.int64, count=len(texts))
    lengths[:] = sizes
    flat = np.fromiter((i for ids in tokenized.ids for i in ids), dtype=np.int64, count=int(sizes.sum()))
    docs = np.repeat(np.arange(len(texts), dtype=np.int64), sizes)
    tokens = mapping[flat] if len(flat) else flat
    width = max(len(vocabulary), 1)
    pairs, counts = np.unique(docs * width + tokens, return_counts=True)
    return (pairs // width).astype(np.int32), (pairs % width).astype(np.int32), counts.astype(np.float32), lengths
