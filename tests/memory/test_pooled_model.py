"""The bundled model run with transformers alone gives sentence-transformers' vectors bit for bit, and starts
without importing sentence-transformers; a folder of another shape is still loaded by sentence-transformers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memory.embedding.embedder import SentenceTransformerEmbedder, bundled_model_path
from memory.embedding.pooled import MeanPooledModel, mean_pooled_shape

ROOT = Path(__file__).resolve().parents[2]

TEXTS = [
    "",
    "ok",
    "   spaces around   ",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "naïve café — Zürich, 日本語, emoji 🐶🎉, a \u200b zero-width space and a tab\tinside",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code, with\nnewlines\n" * 6,
    " ".join(["Melanie talked about painting a sunrise over the lake with her kids."] * 20),  # > 256 wordpieces
    "x" * 3000,
    *[f"message {n}: the sprint ends on day {n % 14} of the {n % 3}rd month" for n in range(12)],
]


def test_the_bundled_folder_is_of_the_mean_pooled_shape() -> None:
    assert mean_pooled_shape(bundled_model_path()) == (256, True)


@pytest.mark.slow
def test_vectors_are_sentence_transformers_own_bit_for_bit(embedder: SentenceTransformerEmbedder) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
    for batch_size in (64, 5):  # batches cut between texts of other lengths than the default's
        expected = reference.encode(TEXTS, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        model = embedder._model  # noqa: SLF001 - the model under the service's embedder
        assert isinstance(model, MeanPooledModel)
        got = model.encode(TEXTS, batch_size=batch_size, normalize_embeddings=True)
        assert got.dtype == np.float32 and np.array_equal(got, expected)
    assert np.array_equal(
        embedder.embed_batch(TEXTS), reference.encode(TEXTS, batch_size=64, normalize_embeddings=True)
    )
    assert embedder.max_tokens == reference.max_seq_length


def test_a_folder_of_another_shape_is_loaded_by_sentence_transformers(tmp_path: Path) -> None:
    folder = tmp_path / "cls-model"
    shutil.copytree(bundled_model_path(), folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    assert mean_pooled_shape(folder) is None
    other = SentenceTransformerEmbedder(model=str(folder))
    assert not isinstance(other._model, MeanPooledModel)  # noqa: SLF001
    vector = other.embed_batch(["a first token pooled"])[0]
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_loading_the_model_imports_neither_sentence_transformers_nor_scikit_learn() -> None:
    script = (
        "import sys\n"
        "from memory.embedding.embedder import SentenceTransformerEmbedder\n"
        "SentenceTransformerEmbedder().embed_batch(['hello'])\n"
        "print(sorted(m for m in ('sentence_transformers', 'sklearn') if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
