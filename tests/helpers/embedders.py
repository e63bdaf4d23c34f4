"""Another embedding model for the tests of a model change, made of the real one."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np


class ProjectedEmbedder:
    """The real bundled model projected onto its first ``dims`` dimensions and renormalised: for the
    store, another embedding model (other name, dimension and vectors)."""

    def __init__(self, inner: Any, dims: int = 256) -> None:
        self._inner = inner
        self._dims = dims

    @property
    def model_id(self) -> str:
        return f"minilm-projected:{self._dims}:test0001"

    @property
    def dimension(self) -> int:
        return self._dims

    @property
    def max_tokens(self) -> int:
        return int(self._inner.max_tokens)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._inner.embed_batch(texts)[:, : self._dims]
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        return list(self.embed_batch(texts))

    def count_tokens(self, text: str) -> int:
        return int(self._inner.count_tokens(text))


class GatedEmbedder:
    """The real model, but a batch holding ``marker`` waits until the test lets it go (``release``), after
    telling it so (``reached``): a test can hold a write path at a known point and act meanwhile."""

    def __init__(self, inner: Any, marker: str) -> None:
        self._inner = inner
        self.marker = marker
        self.reached = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not self.release.is_set() and any(self.marker in text for text in texts):
            self.reached.set()
            assert self.release.wait(600), "the test never released the gated batch"
        return self._inner.embed_batch(texts)
