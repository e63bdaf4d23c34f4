"""Topic boundaries against human labels: TIAGE (PersonaChat dialogues with annotated topic shifts).

    python tests/benchmarks/tiage.py [--data DIR] [--split dev] [--quick]

Reports, on ``anno_dev.json``, the average precision of the per-gap scores against the labels, and
Pk, WindowDiff and boundary F1 of the chosen boundaries, beside the three reference methods of
../shared/data/README.md, recomputed here. The scorer's weights and its granularity (selection
threshold, smallest segment) are chosen on ``anno_train.json`` only, by cross-validation inside
train (tests/benchmarks/fit_boundaries.py); those cross-validated train figures are printed beside
the dev ones. Dev only reports: nothing is chosen on it. ``--quick`` runs on the first 20 dev
dialogues (CI's short form). Not collected by pytest; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT  # noqa: E402
from benchmark_data import data_folder  # noqa: E402

from memory.episodes import boundary_weights as weights  # noqa: E402
from memory.episodes.boundaries import Turn, depth_scores, gap_scores  # noqa: E402
from memory.episodes.segmentation import SegmentationPolicy, Segmenter, split_messages  # noqa: E402
from memory.models import Message  # noqa: E402


def tiage_folder() -> Path:
    """``EPIMEM_TIAGE`` if set, else ``tiage/`` in the benchmark data folder (benchmark_data.py's rule)."""
    if os.environ.get("EPIMEM_TIAGE"):
        return Path(os.environ["EPIMEM_TIAGE"])
    folder = data_folder()
    return (folder if folder is not None else ROOT.parent / "shared" / "data") / "tiage"


DEFAULT_DATA = tiage_folder()
# The reference figures of ../shared/data/README.md on anno_dev.json: (Pk, WindowDiff, F1, placed).
REFERENCE = {
    "a boundary every 4 turns": (0.514, 0.534, 0.225, 301),
    "cosine of 3-turn windows < 0.15 (old heuristic)": (0.426, 0.430, 0.111, 30),
    "TextTiling over MiniLM": (0.449, 0.507, 0.435, 485),
}
# The largest segment the benchmark's selection allows (epimem's default); the smallest one and the
# threshold are the granularity fit_boundaries.py chooses on train (weights.MIN_MESSAGES, THRESHOLD).
BENCH_MAX = 12
# Targets on dev (issue 29).
TARGETS = {"ap": 0.50, "f1": 0.52, "pk": 0.38}


@dataclass(frozen=True)
class Dialogue:
    id: str
    texts: list[str]
    labels: list[int]  # one per gap: 1 = the next turn starts a new topic

    def turns(self) -> list[Turn]:
        return [Turn(text=text, speaker="AB"[i % 2]) for i, text in enumerate(self.texts)]


def load(path: Path) -> list[Dialogue]:
    data = json.loads(path.read_text())
    return [
        Dialogue(id=key, texts=[t for t, _ in turns], labels=[int(label == "1") for _, label in turns[1:]])
        for key, turns in data.items()
    ]


def embed_dialogues(dialogues: Sequence[Dialogue]) -> list[np.ndarray]:
    from memory.embedding.embedder import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(device="cpu")
    vectors = embedder.embed_batch([t for d in dialogues for t in d.texts])
    out, start = [], 0
    for d in dialogues:
        out.append(vectors[start : start + len(d.texts)])
        start += len(d.texts)
    return out


# -- metrics ---------------------------------------------------------------------------------------


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the precision-recall curve, as a sum over the positives in score order."""
    order = np.argsort(-scores, kind="stable")
    hits = labels[order]
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float((precision * hits).sum() / max(1, hits.sum()))


def _window_errors(gold: Sequence[int], hyp: Sequence[int], k: int) -> tuple[int, int, int]:
    """(Pk misses, WindowDiff misses, windows) over every window of k gaps."""
    pk = wd = 0
    windows = max(0, len(gold) - k + 1)
    for start in range(windows):
        g, h = sum(gold[start : start + k]), sum(hyp[start : start + k])
        pk += (g > 0) != (h > 0)
        wd += g != h
    return pk, wd, windows


def segmentation_scores(gold: Sequence[Sequence[int]], hyp: Sequence[Sequence[int]]) -> dict[str, float]:
    """Pk and WindowDiff, averaged over dialogues, each with k = half its mean gold segment length
    (rounded up), and boundary F1 on exact positions over all gaps."""
    pk, wd = [], []
    for g, h in zip(gold, hyp, strict=True):
        k = max(1, math.ceil((len(g) + 1) / (sum(g) + 1) / 2))
        misses, differences, windows = _window_errors(g, h, k)
        pk.append(misses / windows)
        wd.append(differences / windows)
    true_positive = sum(x and y for g, h in zip(gold, hyp, strict=True) for x, y in zip(g, h, strict=True))
    placed, real = sum(map(sum, hyp)), sum(map(sum, gold))
    precision = true_positive / placed if placed else 0.0
    recall = true_positive / real if real else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"pk": float(np.mean(pk)), "windowdiff": float(np.mean(wd)), "f1": f1, "placed": placed}


# -- methods ---------------------------------------------------------------------------------------


def every_four(dialogue: Dialogue, vectors: np.ndarray) -> list[int]:
    return [int(i % 4 == 0) for i in range(1, len(dialogue.texts))]


def old_heuristic(dialogue: Dialogue, vectors: np.ndarray) -> list[int]:
    """The rule in memory/episodes/segmentation.py before issue 19 (kept selectable as method="window")."""
    policy = SegmentationPolicy(min_messages=2, max_messages=1000, method="window")
    return _cuts(dialogue, vectors, policy)


def _cuts(
    dialogue: Dialogue, vectors: np.ndarray, policy: SegmentationPolicy, *, segmenter: Segmenter | None = None
) -> list[int]:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    messages = [
        Message(id=f"m{i}", content=text, producer_id="AB"[i % 2], timestamp=t0 + timedelta(seconds=i))
        for i, text in enumerate(dialogue.texts)
    ]
    starts = {0}
    position = 0
    segments = (
        segmenter.segment(messages, vectors=vectors)
        if segmenter is not None
        else split_messages(messages, policy=policy, vectors=vectors)
    )
    for segment in segments:
        starts.add(position)
        position += len(segment.messages)
    return [int(i in starts) for i in range(1, len(messages))]


def texttiling(dialogue: Dialogue, vectors: np.ndarray) -> list[int]:
    """TextTiling over MiniLM: 2-turn windows; a boundary at a valley of the similarity curve whose
    depth exceeds mean - std / 2 of the dialogue's depth scores."""
    n = len(vectors)
    similarity = np.array(
        [float(_mean_unit(vectors[max(0, g - 2) : g]) @ _mean_unit(vectors[g : g + 2])) for g in range(1, n)]
    )
    depth = depth_scores(similarity)
    cutoff = depth.mean() - depth.std() / 2
    last = len(similarity) - 1
    valley = [
        (i == 0 or s <= similarity[i - 1]) and (i == last or s <= similarity[i + 1]) for i, s in enumerate(similarity)
    ]
    return [int(v and d > cutoff) for v, d in zip(valley, depth, strict=True)]


def _mean_unit(rows: np.ndarray) -> np.ndarray:
    mean = rows.mean(axis=0)
    return mean / (np.linalg.norm(mean) or 1.0)


def train_policy() -> SegmentationPolicy:
    """The selection at the granularity chosen on train: the smallest segment, and a target whose
    threshold shift is nil (1 / the train base rate), so the threshold is the fitted one."""
    return SegmentationPolicy(
        min_messages=weights.MIN_MESSAGES, max_messages=BENCH_MAX, target_messages=1.0 / weights.BASE_RATE
    )


def scored(dialogue: Dialogue, vectors: np.ndarray) -> list[int]:
    """epimem's scorer and selection (method="scored") at the granularity chosen on train."""
    return _cuts(dialogue, vectors, train_policy())


def scored_default_bounds(dialogue: Dialogue, vectors: np.ndarray) -> list[int]:
    return _cuts(dialogue, vectors, SegmentationPolicy())


METHODS: dict[str, Callable[[Dialogue, np.ndarray], list[int]]] = {
    "a boundary every 4 turns": every_four,
    "cosine of 3-turn windows < 0.15 (old heuristic)": old_heuristic,
    "TextTiling over MiniLM": texttiling,
    f"epimem scorer + selection, chosen on train (min {weights.MIN_MESSAGES}, max {BENCH_MAX})": scored,
    "epimem scorer + selection (service defaults: 2-12, target 6)": scored_default_bounds,
}


def llm_method() -> tuple[str, Callable[[Dialogue, np.ndarray], list[int]]] | None:
    """The LLM segmenter (memory/episodes/llm_segmenter.py) with the configured LLM (EPIMEM_LLM_*), or None."""
    from api.settings import Settings
    from memory.episodes.llm_segmenter import LLMSegmenter
    from memory.llm.client import client_from_settings

    settings = Settings()
    if not settings.llm_configured:
        return None
    client = client_from_settings(settings)
    segmenter = LLMSegmenter(client, policy=train_policy())

    def segment(dialogue: Dialogue, vectors: np.ndarray) -> list[int]:
        return _cuts(dialogue, vectors, SegmentationPolicy(), segmenter=segmenter)

    return f"LLM segmenter ({settings.llm_model})", segment


def gap_score_rankings(dialogues: Sequence[Dialogue], vectors: Sequence[np.ndarray]) -> dict[str, float]:
    labels = np.array([x for d in dialogues for x in d.labels])

    def pooled(score: Callable[[Dialogue, np.ndarray], np.ndarray]) -> float:
        return average_precision(np.concatenate([score(d, v) for d, v in zip(dialogues, vectors, strict=True)]), labels)

    def adjacent(d: Dialogue, v: np.ndarray) -> np.ndarray:
        return 1.0 - np.einsum("ij,ij->i", v[:-1], v[1:])

    def windows3(d: Dialogue, v: np.ndarray) -> np.ndarray:
        return np.array(
            [1.0 - float(_mean_unit(v[max(0, g - 3) : g]) @ _mean_unit(v[g : g + 3])) for g in range(1, len(v))]
        )

    return {
        "random (base rate)": float(labels.mean()),
        "1 - cosine of adjacent turns": pooled(adjacent),
        "1 - cosine of 3-turn windows": pooled(windows3),
        "epimem scorer": pooled(lambda d, v: gap_scores(d.turns(), v)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with anno_dev.json")
    parser.add_argument("--split", default="dev", choices=["dev", "train"])
    parser.add_argument("--quick", action="store_true", help="the first 20 dialogues only")
    parser.add_argument("--llm", action="store_true", help="also the LLM segmenter with the configured LLM")
    args = parser.parse_args()

    dialogues = load(args.data / f"anno_{args.split}.json")[: 20 if args.quick else None]
    started = time.perf_counter()
    vectors = embed_dialogues(dialogues)
    gaps = sum(len(d.labels) for d in dialogues)
    print(
        f"data: {args.data}/anno_{args.split}.json ({len(dialogues)} dialogues, {gaps} gaps, "
        f"{sum(map(sum, (d.labels for d in dialogues)))} gold boundaries); embedded in "
        f"{time.perf_counter() - started:.1f}s"
    )
    print("\naverage precision of per-gap scores")
    rankings = gap_score_rankings(dialogues, vectors)
    for name, value in rankings.items():
        print(f"  {name:<40} AP = {value:.3f}")
    gold = [d.labels for d in dialogues]
    print("\nchosen boundaries (Pk, WindowDiff: lower is better)   [README reference on full dev]")
    methods = dict(METHODS)
    if args.llm:
        found = llm_method()
        if found is None:
            print("  LLM segmenter: no LLM configured (EPIMEM_LLM_BASE_URL / EPIMEM_LLM_API_KEY), not measured")
        else:
            methods[found[0]] = found[1]
    chosen: dict[str, float] = {}
    for name, method in methods.items():
        hyp = [method(d, v) for d, v in zip(dialogues, vectors, strict=True)]
        s = segmentation_scores(gold, hyp)
        chosen = s if method is scored else chosen
        ref = REFERENCE.get(name)
        note = f"   [ref Pk {ref[0]:.3f} WD {ref[1]:.3f} F1 {ref[2]:.3f} placed {ref[3]}]" if ref else ""
        print(
            f"  {name:<62} Pk = {s['pk']:.3f} WindowDiff = {s['windowdiff']:.3f} "
            f"F1 = {s['f1']:.3f} placed = {s['placed']}{note}"
        )
    print_against_train(rankings["epimem scorer"], chosen, args.split)


def print_against_train(ap: float, chosen: dict[str, float], split: str) -> None:
    """The chosen setting on this split beside its cross-validated figures inside train, and the targets."""
    train = {"ap": weights.CV_AP, "f1": weights.CV_F1, "pk": weights.CV_PK}
    here = {"ap": ap, "f1": chosen["f1"], "pk": chosen["pk"]}
    print(f"\nchosen on train (L2 {weights.L2:g}, threshold {weights.THRESHOLD:+.2f}, min {weights.MIN_MESSAGES}):")
    for key, label in (("ap", "AP"), ("f1", "F1"), ("pk", "Pk")):
        met = here[key] <= TARGETS[key] if key == "pk" else here[key] >= TARGETS[key]
        sign = "<=" if key == "pk" else ">="
        print(
            f"  {label:<3} {split} {here[key]:.3f}   train 5-fold CV {train[key]:.3f}   "
            f"target {sign} {TARGETS[key]:.2f}: {'met' if met else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
