"""BM25 postings that can be patched: one entry per (record, distinct token) with its count, and each
record's length, in the positions of a group's read snapshot (retrieval.keyword).

Tokens are bm25s's (its tokenizer, English stopwords, the Snowball stemmer) and the scores its Lucene
variant's, computed at query time from the postings of the query's tokens:
idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf part = tf / (k1 (1 - b + b len / avglen) + tf), float32
as bm25s computes them, each query token counted as often as it occurs in the query.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import numpy as np

from memory.readmodel.row_buffer import RowBuffer, appended

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


_WORD = re.compile(r"(?u)\b\w\w+\b")  # bm25s's token pattern


@functools.cache
def _stopwords() -> frozenset[str]:
    return frozenset(_bm25s().stopwords.STOPWORDS_EN)


def tokenize(texts: list[str]) -> list[list[str]]:
    """Each text's tokens as bm25s's tokenizer gives them (lowercase words of two characters or more, English
    stopwords out, Snowball stems), in order; computed here in one pass (bm25s rebuilds its stopword set for
    every text, which dominated the cost of cutting long messages into units)."""
    stopwords = _stopwords()
    words = [[word for word in _WORD.findall(text.lower()) if word not in stopwords] for text in texts]
    unique = list(dict.fromkeys(word for text_words in words for word in text_words))
    stems = dict(zip(unique, _stem(unique), strict=True))
    return [[stems[word] for word in text_words] for text_words in words]


TAIL_SHARE = 16  # entries added since the last sort: at most 1/16 of all (or TAIL_MIN) before sorting again
TAIL_MIN = 4096


@dataclass(frozen=True)
class Postings:
    """``docs``/``tokens``/``counts``: one entry per record position and distinct token; ``lengths``:
    tokens per record. The first ``ordered`` entries are sorted by token (``starts[t]``: where token
    ``t``'s run begins), the rest (what writes added since) are not: a query reads its tokens' runs and
    scans that short tail. ``vocabulary`` (token -> id) grows and is shared along a patched lineage
    while records are only added; ``compacted`` gives a new one when records went."""

    vocabulary: dict[str, int]
    docs: np.ndarray  # int32
    tokens: np.ndarray  # int32
    counts: np.ndarray  # float32
    lengths: np.ndarray  # float32, one per record
    ordered: int = 0
    starts: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    # What docs, tokens and counts view, with room for the entries later writes add (no copy per write).
    buffers: tuple[RowBuffer, RowBuffer, RowBuffer] | None = None

    @classmethod
    def of(cls, texts: Sequence[str], vocabulary: dict[str, int] | None = None) -> Postings:
        vocabulary = {} if vocabulary is None else vocabulary
        docs, tokens, counts, lengths = _entries(texts, vocabulary)
        return _sorted(vocabulary, docs, tokens, counts, lengths)

    def arrays(self) -> dict[str, np.ndarray]:
        """The state, as arrays (memory.readmodel.files keeps it on disk); ``restore`` reads it."""
        words = sorted(self.vocabulary, key=self.vocabulary.__getitem__)  # ids are 0 … n-1
        return {
            "vocabulary": np.frombuffer(json.dumps(words, ensure_ascii=False).encode("utf-8"), dtype=np.uint8),
            "docs": self.docs,
            "tokens": self.tokens,
            "counts": self.counts,
            "lengths": self.lengths,
            "ordered": np.asarray([self.ordered], dtype=np.int64),
            "starts": self.starts,
        }

    @classmethod
    def restore(cls, arrays: dict[str, np.ndarray]) -> Postings:
        words = json.loads(arrays["vocabulary"].tobytes().decode("utf-8"))
        return cls(
            {word: token for token, word in enumerate(words)},
            arrays["docs"],
            arrays["tokens"],
            arrays["counts"],
            arrays["lengths"],
            int(arrays["ordered"][0]),
            arrays["starts"],
        )

    @property
    def nbytes(self) -> int:
        arrays = self.docs.nbytes + self.tokens.nbytes + self.counts.nbytes + self.lengths.nbytes
        return arrays + self.starts.nbytes + 100 * len(self.vocabulary)

    def renumbered(self, old_of_new: np.ndarray, size: int) -> Postings:
        """The entries of the records kept, at their new positions (``old_of_new[p]``: the old position
        of new record ``p``, -1 for a record whose entries go); the others have none (length 0) until
        ``with_texts`` fills them. Filtering keeps the sorted part sorted."""
        kept = np.flatnonzero(old_of_new >= 0)
        lengths = np.zeros(size, dtype=np.float32)
        lengths[kept] = self.lengths[old_of_new[kept]]
        if len(kept) == len(self.lengths) and np.array_equal(old_of_new[kept], kept):
            # Every record kept where it was (writes only added): the entries stay as they are.
            return Postings(
                self.vocabulary, self.docs, self.tokens, self.counts, lengths, self.ordered, self.starts, self.buffers
            )
        new_of_old = np.full(len(self.lengths), -1, dtype=np.int64)
        new_of_old[old_of_new[kept]] = kept
        moved = new_of_old[self.docs] if len(self.docs) else np.zeros(0, dtype=np.int64)
        keep = moved >= 0
        tokens = self.tokens[keep]
        ordered = int(np.count_nonzero(keep[: self.ordered]))
        return Postings(
            self.vocabulary,
            moved[keep].astype(np.int32),
            tokens,
            self.counts[keep],
            lengths,
            ordered,
            _starts(tokens[:ordered], len(self.vocabulary)),
        )

    def compacted(self) -> Postings:
        """These postings with a vocabulary of the tokens they hold only (after records were removed or
        rewritten: no token of a deleted text stays in memory). The new ids keep the old ones' order."""
        used = np.unique(self.tokens)
        remap = np.full(len(self.vocabulary), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        ids = remap[np.fromiter(self.vocabulary.values(), dtype=np.int64, count=len(self.vocabulary))]
        present = ids >= 0
        vocabulary = dict(zip(compress(self.vocabulary, present.tolist()), ids[present].tolist(), strict=True))
        tokens = remap[self.tokens].astype(np.int32)
        starts = _starts(tokens[: self.ordered], len(vocabulary))
        return Postings(vocabulary, self.docs, tokens, self.counts, self.lengths, self.ordered, starts)

    def with_texts(self, positions: np.ndarray, texts: Sequence[str]) -> Postings:
        """These postings with the entries of ``texts`` at ``positions`` (records that have none), added
        to the unsorted tail (all sorted again once the tail is long)."""
        if not len(positions):
            return self
        docs, tokens, counts, lengths = _entries(texts, self.vocabulary)
        where = positions.astype(np.int32)
        lengths_all = self.lengths.copy()
        lengths_all[where] = lengths
        added = (where[docs], tokens, counts)
        entries = len(self.docs) + len(docs)
        if entries - self.ordered > max(TAIL_MIN, entries // TAIL_SHARE):
            docs_all, tokens_all, counts_all = (np.concatenate(pair) for pair in zip(self.entries, added, strict=True))
            return _sorted(self.vocabulary, docs_all, tokens_all, counts_all, lengths_all)
        buffers = self.buffers or (None, None, None)
        grown = [appended(old, kept, new) for old, kept, new in zip(self.entries, buffers, added, strict=True)]
        return Postings(
            self.vocabulary,
            grown[0][0],
            grown[1][0],
            grown[2][0],
            lengths_all,
            self.ordered,
            self.starts,
            (grown[0][1], grown[1][1], grown[2][1]),
        )

    @property
    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.docs, self.tokens, self.counts

    def _entries_of(self, token: int, tail: np.ndarray, tail_tokens: np.ndarray) -> np.ndarray:
        found = np.arange(0)
        if token + 1 < len(self.starts):
            found = np.arange(self.starts[token], self.starts[token + 1])
        return np.concatenate([found, tail[tail_tokens == token]]) if len(tail) else found

    def _tail_of(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The entries of the unsorted tail (added since the last sort) that hold one of these tokens, and
        their tokens."""
        wanted = np.unique(np.asarray(ids, dtype=np.int32))
        tail = self.ordered + np.flatnonzero(np.isin(self.tokens[self.ordered :], wanted))
        return tail, self.tokens[tail]

    def scores(self, query_tokens: list[str], *, k1: float, b: float) -> np.ndarray:
        """BM25 of every record for the query's tokens (float32, zeros where none matches)."""
        size = len(self.lengths)
        found = np.zeros(size, dtype=np.float32)
        ids = [self.vocabulary[token] for token in query_tokens if token in self.vocabulary]
        if not ids or not size:
            return found
        average = float(self.lengths.mean(dtype=np.float64)) or 1.0
        tail, tail_tokens = self._tail_of(ids)
        parts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for token in ids:  # in the query's order, as bm25s adds them up
            if token not in parts:
                entries = self._entries_of(token, tail, tail_tokens)
                docs = self.docs[entries]
                idf = float(np.float32(_idf(size, len(entries))))
                counts = self.counts[entries].astype(np.float64)
                norms = k1 * ((1 - b) + b * self.lengths[docs].astype(np.float64) / average)
                parts[token] = (docs, (idf * (counts / (norms + counts))).astype(np.float32))
            docs, part = parts[token]
            np.add.at(found, docs, part)
        return found


def _idf(size: int, found: int) -> float:
    """BM25's idf of a token that ``found`` of ``size`` records hold (as bm25s weighs it)."""
    return math.log(1 + (size - found + 0.5) / (found + 0.5))


def _starts(tokens: np.ndarray, vocabulary: int) -> np.ndarray:
    """Where each token's run begins in entries sorted by token (one more: the end)."""
    starts = np.zeros(vocabulary + 1, dtype=np.int64)
    if len(tokens):
        np.cumsum(np.bincount(tokens, minlength=vocabulary), out=starts[1:])
    return starts


def _sorted(
    vocabulary: dict[str, int], docs: np.ndarray, tokens: np.ndarray, counts: np.ndarray, lengths: np.ndarray
) -> Postings:
    order = np.argsort(tokens, kind="stable")
    tokens = tokens[order]
    return Postings(
        vocabulary, docs[order], tokens, counts[order], lengths, len(tokens), _starts(tokens, len(vocabulary))
    )


def _entries(texts: Sequence[str], vocabulary: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Postings of ``texts`` (docs numbered from 0), with their tokens added to ``vocabulary``."""
    lengths = np.zeros(len(texts), dtype=np.float32)
    if not texts:
        empty = np.zeros(0, dtype=np.int32)
        return empty, empty, np.zeros(0, dtype=np.float32), lengths
    tokenized = tokenize(list(texts))
    sizes = np.fromiter((len(tokens) for tokens in tokenized), dtype=np.int64, count=len(texts))
    lengths[:] = sizes
    ids = (vocabulary.setdefault(token, len(vocabulary)) for tokens in tokenized for token in tokens)
    flat = np.fromiter(ids, dtype=np.int64, count=int(sizes.sum()))
    docs = np.repeat(np.arange(len(texts), dtype=np.int64), sizes)
    width = max(len(vocabulary), 1)
    pairs, counts = np.unique(docs * width + flat, return_counts=True)
    return (pairs // width).astype(np.int32), (pairs % width).astype(np.int32), counts.astype(np.float32), lengths
