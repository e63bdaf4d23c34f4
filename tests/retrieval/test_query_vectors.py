"""A request's query vectors: the query and the query without the speakers it names, in one forward pass."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from helpers.builders import messages

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder


def counting(embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The texts of every forward pass of the real model from now on."""
    passes: list[list[str]] = []
    encode = embedder.embed_batch

    def embed_batch(texts: Sequence[str]) -> np.ndarray:
        passes.append(list(texts))
        return encode(texts)

    monkeypatch.setattr(embedder, "embed_batch", embed_batch)
    return passes


def test_embed_queries_encodes_what_the_cache_lacks_in_one_pass(
    embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["Where did Ana hike in query-vectors-1?", "Where did hike in query-vectors-1?"]
    alone = [embedder.embed_batch([text])[0] for text in texts]
    passes = counting(embedder, monkeypatch)
    vectors = embedder.embed_queries(texts)
    assert passes == [texts]
    for vector, single in zip(vectors, alone, strict=True):
        np.testing.assert_allclose(vector, single, atol=1e-5)  # padded in a batch of two, the same vector
    again = embedder.embed_queries([texts[1], texts[0], texts[1]])
    assert embedder.embed_query(texts[1]) is vectors[1]
    assert passes == [texts], "both are cached: no second pass"
    assert [v is w for v, w in zip(again, [vectors[1], vectors[0], vectors[1]], strict=True)] == [True] * 3
    third = "What did Ana paint in query-vectors-1?"
    assert np.allclose(embedder.embed_queries([texts[0], third])[1], embedder.embed_batch([third])[0], atol=1e-5)
    assert passes[1] == [third], "only the text the cache lacks is encoded"


def test_a_search_naming_a_speaker_pays_one_forward_pass(
    service: Epimem, group_id: str, embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["I hiked up to the glacier lake on Sunday.", "Did you take photos of the glacier, Ana?"]
    service.add_messages(group_id, "s", messages(2, text=texts, speakers=("Ana", "Ben")))
    service.flush(group_id, "s")
    passes = counting(embedder, monkeypatch)
    tag = f"(query-vectors {group_id})"  # never in the session-wide embedder's query cache yet
    hits = service.search(group_id, f"Where did Ana hike to {tag}?", k=3)
    assert hits and "glacier" in hits[0].episode.content.lower()
    assert passes == [[f"Where did Ana hike to {tag}?", f"Where did hike to {tag}?"]]
    service.search(group_id, f"What did Ben ask about {tag}?", k=3)
    assert len(passes) == 2 and len(passes[1]) == 2, "the query and the query without Ben, in one pass"
