"""One embedder shared by a server's threads: counting wordpieces (context budgets) while other threads embed
(ingest, queries) must not change what those batches are padded to."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from memory.embedding.embedder import SentenceTransformerEmbedder

TEXTS = [
    "ok",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: the kids loved the pottery class, we made a bowl with a dog on it 🐶 and it came out lopsided.",
    "naïve café — Zürich, 日本語, and a \u200b zero-width space",
    " ".join(["Melanie talked about painting a sunrise over the lake with her kids."] * 30),  # > 256 wordpieces
]


@pytest.fixture
def embedder(model_embedder: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
    """The embedder as the service builds it: every batch a forward pass."""
    return model_embedder


def test_counting_leaves_the_embedding_tokenizer_padded(embedder: SentenceTransformerEmbedder) -> None:
    # The Hugging Face tokenizer sets padding on its shared backend for each call; a count used to switch it off
    # for everyone, and a batch whose padding was switched off between the setting and the encoding failed.
    shared = embedder._model.tokenizer.backend_tokenizer
    embedder.embed_batch(TEXTS[:3])
    padding, truncation = shared.padding, shared.truncation
    assert padding is not None and truncation is not None
    for text in TEXTS:
        embedder.count_tokens(text)
    assert (shared.padding, shared.truncation) == (padding, truncation)


def test_counts_are_the_tokenizers_wordpieces_without_truncation(embedder: SentenceTransformerEmbedder) -> None:
    tokenizer = embedder._model.tokenizer
    for text in [*TEXTS, ""]:
        assert embedder.count_tokens(text) == len(tokenizer.tokenize(text))
    assert embedder.count_tokens(TEXTS[-1]) > embedder.max_tokens  # never cut at the model's window


@pytest.mark.slow
def test_counting_and_embedding_in_threads_give_the_serial_results(embedder: SentenceTransformerEmbedder) -> None:
    batches = [TEXTS[i % 5 : i % 5 + 1 + i % 4] for i in range(12)]
    expected_vectors = [embedder.embed_batch(batch) for batch in batches]
    expected_counts = [embedder.count_tokens(text) for text in TEXTS]
    errors: list[BaseException] = []
    mismatches: list[str] = []

    def embed(rounds: int) -> None:
        try:
            for round_ in range(rounds):
                index = round_ % len(batches)
                if not np.allclose(embedder.embed_batch(batches[index]), expected_vectors[index], atol=1e-5):
                    mismatches.append(f"batch {index}")
        except BaseException as error:  # a worker's failure is the test's failure, reported below
            errors.append(error)

    def count(rounds: int) -> None:
        try:
            for round_ in range(rounds):
                index = round_ % len(TEXTS)
                if embedder.count_tokens(TEXTS[index]) != expected_counts[index]:
                    mismatches.append(f"count {index}")
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=embed, args=(24,)) for _ in range(3)]
    workers += [threading.Thread(target=count, args=(3000,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == [] and mismatches == []


def test_a_query_is_encoded_on_one_thread_and_batches_keep_every_core(
    embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch's intra-op threads are OpenMP's setting of the calling thread: a server thread set to two (the default
    # on a 2-core machine) encodes a query on one, then has its two again; a batch (ingest) keeps both.
    import torch

    encode = embedder.embed_batch
    threads_seen: list[int] = []

    def embed_batch(texts: list[str]) -> np.ndarray:
        threads_seen.append(torch.get_num_threads())
        return encode(texts)

    monkeypatch.setattr(embedder, "embed_batch", embed_batch)
    outside = torch.get_num_threads()
    found: dict[str, object] = {}

    def server_thread() -> None:
        torch.set_num_threads(2)
        query = "When did Melanie paint a sunrise? (one-thread query 1)"
        found["query"] = embedder.embed_queries([query, "When did paint a sunrise? (one-thread query 1)"])[0]
        found["after"] = torch.get_num_threads()
        found["batch"] = embedder.embed_batch([query])[0]

    worker = threading.Thread(target=server_thread)
    worker.start()
    worker.join()
    assert threads_seen == [1, 2]
    assert found["after"] == 2, "the thread has its setting back"
    assert torch.get_num_threads() == outside, "other threads keep theirs"
    np.testing.assert_allclose(found["query"], found["batch"], atol=1e-6)  # the same vector either way
