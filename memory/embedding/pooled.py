"""A sentence-transformers folder of the common shape (a transformer, mean pooling, optionally a normalisation)
run with ``transformers`` alone.

The vectors are those sentence-transformers gives for the same folder, bit for bit (tested on the bundled
model): the same tokenisation (the folder's window), the same batches (longest texts first), the same pooling
and normalisation operations. What it saves is the start: importing sentence-transformers takes ~2.6 s (it
imports scikit-learn and scipy for utilities epimem never calls), about half of what a process spends before
its first vector. A folder of any other shape (a projection, another pooling, prompts) is loaded by
sentence-transformers itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_OTHER_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def folder_modules(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A sentence-transformers folder's modules (``modules.json``, in order) and its pooling module's config
    (``{}`` without one). Raises ValueError, AttributeError or TypeError on a malformed file."""
    modules = list(_read_json(path / "modules.json"))
    pooling = next((module for module in modules if str(module.get("type", "")) == _POOLING), None)
    config = _read_json(path / str(pooling.get("path", "")) / "config.json") if pooling is not None else {}
    return modules, dict(config)


def mean_pooled_shape(path: Path) -> tuple[int, bool] | None:
    """(window in wordpieces, normalised) when the folder is a transformer with mean pooling and nothing else
    but a normalisation; None for any other shape."""
    try:
        modules, pooling = folder_modules(path)
        types = [str(module.get("type", "")) for module in modules]
        if types[:2] != [_TRANSFORMER, _POOLING] or any(kind != _NORMALIZE for kind in types[2:]):
            return None
        if modules[0].get("path", "") != "":
            return None
        if pooling.get("pooling_mode_mean_tokens") is not True or any(pooling.get(k) for k in _OTHER_POOLING_MODES):
            return None
        config = _read_json(path / "sentence_bert_config.json")
        extras = _read_json(path / "config_sentence_transformers.json")
        if config.get("do_lower_case") or extras.get("prompts") or extras.get("default_prompt_name"):
            return None
        window = config.get("max_seq_length")
    except (OSError, ValueError, AttributeError, TypeError, IndexError):
        return None
    if not isinstance(window, int) or window <= 0:
        return None
    return window, len(types) == 3


class MeanPooledModel:
    """The subset of ``SentenceTransformer`` that epimem uses (``encode``, ``tokenizer``, ``max_seq_length``,
    ``device``, ``get_embedding_dimension``), for a folder of the mean-pooled shape."""

    def __init__(self, path: Path, *, window: int, normalized: bool, device: str) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self._transformer = AutoModel.from_pretrained(str(path), local_files_only=True).to(device).eval()
        self.max_seq_length = window
        self._normalized = normalized

    @property
    def device(self) -> Any:
        return self._transformer.device

    def get_embedding_dimension(self) -> int:
        return int(self._transformer.config.hidden_size)

    def encode(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 32,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        show_progress_bar: bool = False,
    ) -> np.ndarray:
        """Vectors in the order of ``texts`` (always a numpy array; no progress bar is drawn). Batches are taken
        longest text first, as sentence-transformers takes them: a batch pads to its longest text, and padding
        changes the last bits of a vector."""
        import torch

        del convert_to_numpy, show_progress_bar

        order = np.argsort([-len(text) for text in texts])
        out = np.zeros((len(texts), self.get_embedding_dimension()), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            features = self.tokenizer(
                [texts[i] for i in chosen],
                padding=True,
                truncation="longest_first",
                max_length=self.max_seq_length,
                return_tensors="pt",
            ).to(self.device)
            with torch.inference_mode():
                tokens = self._transformer(**features).last_hidden_state
                mask = features["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                summed = (tokens * mask).sum(dim=1, dtype=torch.float32)
                vectors = summed / torch.clamp(mask.sum(dim=1, dtype=torch.float32), min=1e-9)
                if self._normalized:
                    vectors = torch.nn.functional.normalize(vectors, p=2, dim=-1)
                if normalize_embeddings:
                    vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
            out[chosen] = vectors.cpu().numpy()
        return out
