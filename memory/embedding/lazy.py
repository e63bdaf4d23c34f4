"""An embedder that loads its model on first use.

Loading the model takes seconds (PyTorch, weights); commands that only read or delete stored
records (``epimem stats``, ``export``, ``timeline``, ``delete``) never embed anything, so the
composition root hands out this wrapper. Its ``model_id`` and ``dimension`` come from the model's
files without loading it (sentence-transformers records the dimension in its pooling module's ``config.json``),
so the store can check partitions against the configured model before, or without, any load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory.background import yield_to_searches
from memory.embedding.embedder import (
    BUNDLED_MODEL_NAME,
    Backend,
    SentenceTransformerEmbedder,
    _fingerprint,
    bundled_model_path,
)
from memory.embedding.pooled import folder_modules


def _dimension_on_disk(path: Path) -> int | None:
    """The output dimension written in a sentence-transformers folder, or None when not found."""
    try:
        modules, pooling = folder_modules(path)
        if any("Dense" in str(module.get("type", "")) for module in modules):
            return None  # a projection after pooling: only the loaded model knows its dimension
        value = pooling.get("word_embedding_dimension")
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


class LazyEmbedder(SentenceTransformerEmbedder):
    """``SentenceTransformerEmbedder`` with the load deferred until a text is embedded or tokenised."""

    def __init__(
        self,
        *,
        model: str | None = None,
        backend: Backend = "torch",
        load: Callable[[], SentenceTransformerEmbedder],
    ) -> None:
        # The parent's __init__ loads the model, which is exactly what is deferred here.
        self._load = load
        self.announce: Callable[[], None] | None = None  # called once, right before the model loads
        self._loaded: SentenceTransformerEmbedder | None = None
        self._guard = threading.Lock()
        self.backend = backend
        path = bundled_model_path() if model is None else Path(model)
        name = BUNDLED_MODEL_NAME if model is None else model
        dimension = _dimension_on_disk(path) if path.is_dir() else None
        suffix = ":int8" if backend == "onnx-int8" else ""
        self._known_id = f"{name}:{dimension}:{_fingerprint(path)}{suffix}" if dimension is not None else None
        self._known_dimension = dimension

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def load(self) -> None:
        """Load the model now (``announce`` is called first if it was not loaded yet)."""
        self.model()

    def model(self) -> SentenceTransformerEmbedder:
        """The real embedder, loaded now if it was not yet."""
        with self._guard:
            if self._loaded is None:
                if self.announce is not None:
                    self.announce()
                self._loaded = self._load()
            return self._loaded

    @property
    def model_id(self) -> str:
        return self._known_id if self._known_id is not None else self.model().model_id

    @property
    def dimension(self) -> int:
        return self._known_dimension if self._known_dimension is not None else self.model().dimension

    @property
    def max_tokens(self) -> int:
        return self.model().max_tokens

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        yield_to_searches()  # a background batch starts between searches (memory.background)
        return self.model().embed_batch(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.model().embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self.model().embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return self.model().count_tokens(text)

    def __getattr__(self, name: str) -> Any:
        # Anything else the loaded embedder offers (``_model`` in benchmarks, ``_onnx``...).
        if name.startswith("__") or name in {"_load", "_loaded", "_guard", "announce"}:
            raise AttributeError(name)
        return getattr(self.model(), name)
