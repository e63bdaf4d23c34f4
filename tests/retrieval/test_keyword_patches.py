"""BM25 postings give bm25s's scores exactly, built from scratch and after any patch (records removed,
rewritten, added): the keyword index a write patches ranks as the one a rebuild would."""

from __future__ import annotations

import bm25s
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.bm25 import Postings, _stem, tokenize

WORDS = ["lake", "dog", "Rex", "painting", "painted", "the", "pottery", "Lisbon", "train", "kitten", "what", "June"]
TEXTS = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)
QUERIES = ["the dog Rex", "painting pottery", "kitten kitten Lisbon", "what", "train in June lake"]


def reference(texts: list[str], query: str) -> np.ndarray:
    """bm25s as the keyword index used it before postings (a score matrix built from every text)."""
    tokens = tokenize([query])[0]
    if not tokens or not any(tokenize(texts)):  # bm25s cannot index texts without a token (nothing matches)
        return np.zeros(len(texts), dtype=np.float32)
    index = bm25s.BM25()
    index.index(tokenize(texts), show_progress=False)
    return np.asarray(index.get_scores(tokens), dtype=np.float32)


def same_scores(postings: Postings, texts: list[str]) -> None:
    for query in QUERIES:
        found = postings.scores(tokenize([query])[0], k1=1.5, b=0.75)
        assert np.array_equal(found, reference(texts, query)), query


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(TEXTS, min_size=1, max_size=20),
    removed=st.sets(st.integers(0, 19), max_size=6),
    rewritten=st.dictionaries(st.integers(0, 19), TEXTS, max_size=4),
    added=st.lists(TEXTS, max_size=5),
    sort_again=st.booleans(),
)
def test_patched_postings_score_as_bm25s_from_scratch(
    texts: list[str], removed: set[int], rewritten: dict[int, str], added: list[str], sort_again: bool
) -> None:
    """``sort_again``: the added entries sorted into the rest at once, else left in the unsorted tail."""
    postings = Postings.of(texts)
    same_scores(postings, texts)
    kept = [p for p in range(len(texts)) if p not in removed]
    old_of_new = np.asarray(kept + [-1] * len(added), dtype=np.int64)
    patched_texts = [texts[p] for p in kept] + added
    for position, text in rewritten.items():
        if position < len(kept):
            old_of_new[position] = -1
            patched_texts[position] = text
    stale = np.flatnonzero(old_of_new < 0)
    patched = postings.renumbered(old_of_new, len(patched_texts)).with_texts(stale, [patched_texts[p] for p in stale])
    same_scores(patched, patched_texts)
    if not removed:
        assert patched.vocabulary is postings.vocabulary  # shared along the lineage, only grown


PIECES = list("aAbéÉßİı_ 1'.,\n-") + ["the ", "Running ", "dogs ", "ﬁ", "Σ", "naïve", "ISTANBUL", "x2"]


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(PIECES), max_size=24).map("".join), max_size=6))
def test_tokens_are_bm25s_own(texts: list[str]) -> None:
    """The tokenizer gives bm25s's tokens (its pattern, lowercase, English stopwords, Snowball stems), in order."""
    assert tokenize(texts) == list(
        bm25s.tokenize(texts, stopwords="en", stemmer=_stem, return_ids=False, show_progress=False)
    )
    assert tokenize(["The dogs were running, and the cat ran."]) == [["dog", "were", "run", "cat", "ran"]]
