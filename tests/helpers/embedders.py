"""Embedders for the tests, all made of the real bundled model: another model for the tests of a model change,
a gated one, and the suite's own that remembers each text's vector."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.embedding.embedder import SentenceTransformerEmbedder


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


class RememberingEmbedder(SentenceTransformerEmbedder):
    """The real bundled model, each text's vector computed once per test process and remembered.

    The tests write the same few hundred texts thousands of times (builders, example conversations); the model's
    forward pass for them was about half of a worker's CPU. A text not seen yet is encoded by the model in a batch
    of the texts missing from the call, exactly as the service's embedder does; a remembered one is the vector the
    model gave it then. Tests of the embedder itself (threads, tracing spans) take ``model_embedder`` instead."""

    def __init__(self, *args: Any, capacity: int = 50_000, **kwargs: Any) -> None:
        self._remembered: OrderedDict[str, np.ndarray] = OrderedDict()
        self._remembered_lock = threading.Lock()
        self._capacity = capacity
        super().__init__(*args, **kwargs)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return super().embed_batch(texts)
        with self._remembered_lock:
            found = {text: self._remembered[text] for text in texts if text in self._remembered}
        missing = list(dict.fromkeys(text for text in texts if text not in found))
        if missing:
            found |= {text: vector.copy() for text, vector in zip(missing, super().embed_batch(missing), strict=True)}
            with self._remembered_lock:
                for text in missing:
                    self._remembered[text] = found[text]
                while len(self._remembered) > self._capacity:
                    self._remembered.popitem(last=False)
        return np.stack([found[text] for text in texts]).astype(np.float32, copy=False)
