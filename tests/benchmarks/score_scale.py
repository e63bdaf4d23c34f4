"""The 0..1 scale of search scores: what a score means, and which ``min_score`` drops the unrelated tail.

    .venv/bin/python tests/benchmarks/score_scale.py [--datasets locomo,realtalk] [--data-dir DIR] [--k 10] [--quick]

Every question of the datasets (each conversation one group, ingested as tests/benchmarks/recall.py does; with
``--data-dir`` a folder that recall.py ingested is reused) is searched with ``k`` hits. A hit *holds evidence*
when its episode's source messages include one of the question's evidence messages. Printed per dataset:

- the raw scores (``components.raw``: unbounded) and the 0..1 scores of the hits, with and without evidence;
- the logistic curve of "holds evidence" on the raw score, fitted on all conversations (``SCALE_SLOPE``,
  ``SCALE_MIDPOINT`` of retrieval/search.py come from LoCoMo dev, k = 10), and per bin of the 0..1 score the
  share of hits that held evidence, each conversation scored with the curve fitted on the others (held out);
- per ``min_score``: the share of evidence hits kept, of the other hits dropped, of the questions that keep an
  evidence hit (of those that had one), and the hits left per question.

``--quick``: the first sessions of one conversation per dataset (the short form the test suite runs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import _common  # noqa: E402, F401  (offline settings, the repository importable)
from recall import ingest, load_dataset, scored_questions  # noqa: E402

THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
BINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


@dataclass
class Hits:
    """One row per hit: its conversation, question number, raw score, 0..1 score, and whether it holds evidence."""

    conversation: list[str]
    question: list[int]
    raw: list[float]
    score: list[float]
    evidence: list[bool]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.asarray(self.conversation),
            np.asarray(self.question),
            np.asarray(self.raw),
            np.asarray(self.score),
            np.asarray(self.evidence, dtype=bool),
        )


def collect(service: object, samples: Sequence[object], k: int) -> Hits:
    hits = Hits([], [], [], [], [])
    number = 0
    for sample in samples:
        for _category, question, evidence in scored_questions(sample):  # type: ignore[arg-type]
            wanted = set(evidence)
            for hit in service.search(sample.sample_id, question, k=k):  # type: ignore[attr-defined]
                hits.conversation.append(sample.sample_id)  # type: ignore[attr-defined]
                hits.question.append(number)
                hits.raw.append(hit.components.raw)
                hits.score.append(hit.score)
                hits.evidence.append(bool(wanted & set(hit.episode.source_message_ids)))
            number += 1
    return hits


def fit_logistic(raw: np.ndarray, label: np.ndarray, steps: int = 50) -> tuple[float, float]:
    """(slope, midpoint) of P(label) = 1 / (1 + exp(-slope x (raw - midpoint))), by Newton's method on the
    log-likelihood (a tiny ridge keeps it finite when the classes separate)."""
    design = np.column_stack([raw, np.ones_like(raw)])
    weights = np.zeros(2)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (label - p) - 1e-6 * weights
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        weights += step
        if np.abs(step).max() < 1e-10:
            break
    slope, intercept = weights
    return float(slope), float(-intercept / slope)


def curve(raw: np.ndarray, slope: float, midpoint: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-slope * (raw - midpoint)))


def quantiles(values: np.ndarray) -> str:
    if not len(values):
        return "(none)"
    points = np.quantile(values, [0.0, 0.1, 0.5, 0.9, 1.0])
    return " / ".join(f"{v:.3f}" for v in points)


def report(name: str, hits: Hits, k: int) -> None:
    conversation, question, raw, score, evidence = hits.arrays()
    asked = len(set(question.tolist()))
    print(f"\n## {name}: {asked} questions, {len(raw)} hits (k = {k}), {evidence.mean():.1%} hold evidence")
    print("min / p10 / median / p90 / max:")
    print(f"  raw score, hits with evidence = {quantiles(raw[evidence])}")
    print(f"  raw score, other hits = {quantiles(raw[~evidence])}")
    print(f"  0..1 score, hits with evidence = {quantiles(score[evidence])}")
    print(f"  0..1 score, other hits = {quantiles(score[~evidence])}")
    slope, midpoint = fit_logistic(raw, evidence.astype(float))
    print(f"fitted slope = {slope:.3f}, fitted midpoint = {midpoint:.3f} (all conversations)")

    held_out = np.zeros_like(raw)
    for held in sorted(set(conversation.tolist())):
        inside = conversation == held
        if inside.all():  # one conversation: nothing to hold out against
            held_out = curve(raw, slope, midpoint)
            break
        fitted = fit_logistic(raw[~inside], evidence[~inside].astype(float))
        held_out[inside] = curve(raw[inside], *fitted)
    print("\n| 0..1 score (held out) | hits | mean score | share with evidence |")
    print("|---|---|---|---|")
    for low, high in zip(BINS, BINS[1:], strict=False):
        inside = (held_out >= low) & ((held_out < high) if high < 1.0 else (held_out <= high))
        if inside.any():
            shares = f"{held_out[inside].mean():.3f} | {evidence[inside].mean():.3f}"
            print(f"| {low:.2f}-{high:.2f} | {inside.sum()} | {shares} |")

    had = {q for q, e in zip(question.tolist(), evidence.tolist(), strict=True) if e}
    print("\n| min_score | evidence hits kept | other hits dropped | questions keeping evidence | hits/question |")
    print("|---|---|---|---|---|")
    for threshold in THRESHOLDS:
        kept = score >= threshold
        keeping = {q for q, e, s in zip(question.tolist(), evidence.tolist(), kept.tolist(), strict=True) if e and s}
        print(
            f"| {threshold:.2f} | {kept[evidence].mean():.1%} | {(~kept[~evidence]).mean():.1%} | "
            f"{len(keeping) / max(1, len(had)):.1%} | {kept.sum() / asked:.2f} |"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="locomo")
    parser.add_argument("--data-dir", default=None, help="an epimem data folder, kept and reused (default: temporary)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="the first sessions of one conversation per dataset")
    args = parser.parse_args(argv)

    from api.facade import Epimem

    with tempfile.TemporaryDirectory(prefix="epimem-scores-") as scratch:
        service = Epimem.from_settings(data_dir=Path(args.data_dir or scratch), background=False)
        try:
            for name in args.datasets.split(","):
                samples = load_dataset(name, quick=args.quick)
                ingest(service, samples)
                report(name, collect(service, samples, args.k), args.k)
        finally:
            service.close()


if __name__ == "__main__":
    main()
