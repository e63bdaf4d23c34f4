"""The ONNX embedding backends: exported once from the local weights, the same vectors as PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    " ".join(["Melanie talked about painting a sunrise over the lake with her kids."] * 30),  # > 256 wordpieces
    "ok",
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-data")


@pytest.fixture(scope="module")
def onnx_dir(data_dir: Path) -> Path:
    return data_dir / "models"  # where the composition root puts them: one export for this module


def test_onnx_backend_gives_the_pytorch_vectors(embedder: SentenceTransformerEmbedder, onnx_dir: Path) -> None:
    onnx = SentenceTransformerEmbedder(backend="onnx", onnx_dir=onnx_dir, batch_size=2)
    exported = list(onnx_dir.rglob("model.onnx"))
    assert len(exported) == 1, "the transformer is exported once into the given folder"
    reference = embedder.embed_batch(TEXTS)
    vectors = onnx.embed_batch(TEXTS)  # batches of 2, mixed lengths: padding and order must not matter
    assert vectors.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(reference * vectors, axis=1))) > 0.9999
    assert onnx.model_id == embedder.model_id  # same vectors: partitions built with either stay readable
    a, b = onnx.embed_batch(TEXTS[:2])
    assert abs(float(a @ b) - 0.755) < 0.01

    mtime = exported[0].stat().st_mtime_ns
    again = SentenceTransformerEmbedder(backend="onnx", onnx_dir=onnx_dir)
    assert exported[0].stat().st_mtime_ns == mtime, "a second load reuses the exported file"
    np.testing.assert_allclose(again.embed_query(TEXTS[2]), vectors[2], atol=1e-5)


def test_int8_backend_is_close_but_recorded_as_another_model(
    embedder: SentenceTransformerEmbedder, onnx_dir: Path
) -> None:
    int8 = SentenceTransformerEmbedder(backend="onnx-int8", onnx_dir=onnx_dir)
    assert (onnx_dir / next(onnx_dir.iterdir()).name / "model-int8.onnx").exists()
    cosine = np.sum(embedder.embed_batch(TEXTS) * int8.embed_batch(TEXTS), axis=1)
    assert float(cosine.min()) > 0.85
    assert int8.model_id != embedder.model_id and int8.model_id.endswith(":int8")


def test_backend_is_chosen_by_settings(data_dir: Path) -> None:
    service = Epimem.from_settings(data_dir=data_dir, background=False, embedding_backend="onnx")
    try:
        assert service.embedder.backend == "onnx"
        assert list((data_dir / "models").rglob("model.onnx")), "exported into the data folder"
        service.add_messages("g", "s", [{"id": "1", "content": "Ana adopted a puppy named Rex.", "producer_id": "ana"}])
        service.flush("g", "s")
        hits = service.search("g", "who has a dog?")
        assert hits and "Rex" in hits[0].episode.content
    finally:
        service.close()
