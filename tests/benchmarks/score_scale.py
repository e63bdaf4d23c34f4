"""The 0..1 scale of search scores: what a score means, and which ``min_score`` drops the unrelated tail.

    .venv/bin/python tests/benchmarks/score_scale.py [--datasets locomo,realtalk] [--data-dir DIR] [--k 10]
                                                     [--dump FILE] [--quick]

Every question of the datasets (each conversation one group, ingested as tests/benchmarks/recall.py does; with
``--data-dir`` a folder that recall.py ingested is reused) is searched with ``k`` hits. A hit *holds evidence*
when its episode's source messages include one of the question's evidence messages. Each group is also asked the
questions of the next conversation of its dataset (*foreign* questions: memory cannot answer them, every hit is
unrelated). Printed per dataset:

- the raw scores (``components.raw``: unbounded) and the 0..1 scores of the hits: with evidence, without, foreign;
- the logistic curve of "holds evidence" on the raw score, fitted on all conversations (``SCALE_SLOPE``,
  ``SCALE_MIDPOINT`` of retrieval/search.py come from LoCoMo dev, k = 10), and per bin of the 0..1 score the
  share of hits that held evidence, each conversation scored with the curve fitted on the others (held out);
- per ``min_score``: the share of evidence hits kept, of the other hits dropped, of the questions that keep an
  evidence hit (of those that had one), the hits left per question, and for the foreign questions the share of
  their hits dropped and of them left with no hit at all.

``--dump FILE`` writes every hit (dataset, conversation, question, foreign, raw, score, evidence) as JSON Lines.
``--quick``: the first sessions of one conversation per dataset (the short form the test suite runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import _common  # noqa: E402, F401  (offline settings, the repository importable)
from recall import QUICK_SESSIONS, cut, ingest, load_dataset, scored_questions  # noqa: E402

THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
BINS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


@dataclass
class Hit:
    dataset: str
    conversation: str
    question: int  # numbered per dataset; a foreign question has its own number
    foreign: bool
    raw: float
    score: float
    evidence: bool


def collect(name: str, service: Any, samples: Sequence[Any], k: int) -> list[Hit]:
    hits: list[Hit] = []
    number = 0
    for position, sample in enumerate(samples):
        asked = [(question, set(evidence), False) for _c, question, evidence in scored_questions(sample)]
        if len(samples) > 1:  # the next conversation's questions: nothing here answers them
            other = samples[(position + 1) % len(samples)]
            asked += [(question, set(), True) for _c, question, _e in scored_questions(other)]
        for question, wanted, foreign in asked:
            for hit in service.search(sample.sample_id, question, k=k):
                holds = bool(wanted & set(hit.episode.source_message_ids))
                hits.append(Hit(name, sample.sample_id, number, foreign, hit.components.raw, hit.score, holds))
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


def report(name: str, hits: list[Hit], k: int) -> None:
    own = [hit for hit in hits if not hit.foreign]
    conversation = np.asarray([hit.conversation for hit in own])
    question = np.asarray([hit.question for hit in own])
    raw = np.asarray([hit.raw for hit in own])
    score = np.asarray([hit.score for hit in own])
    evidence = np.asarray([hit.evidence for hit in own], dtype=bool)
    foreign = [hit for hit in hits if hit.foreign]
    foreign_raw = np.asarray([hit.raw for hit in foreign])
    foreign_score = np.asarray([hit.score for hit in foreign])
    asked = len(set(question.tolist()))
    print(f"\n## {name}: {asked} questions, {len(raw)} hits (k = {k}), {evidence.mean():.1%} hold evidence")
    print("min / p10 / median / p90 / max:")
    print(f"  raw score, hits with evidence = {quantiles(raw[evidence])}")
    print(f"  raw score, other hits = {quantiles(raw[~evidence])}")
    print(f"  raw score, hits of foreign questions = {quantiles(foreign_raw)}")
    print(f"  0..1 score, hits with evidence = {quantiles(score[evidence])}")
    print(f"  0..1 score, other hits = {quantiles(score[~evidence])}")
    print(f"  0..1 score, hits of foreign questions = {quantiles(foreign_score)}")
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
    print("\n| 0..1 score (curve fitted on the other conversations if any) | hits | mean score | share with evidence |")
    print("|---|---|---|---|")
    for low, high in zip(BINS, BINS[1:], strict=False):
        inside = (held_out >= low) & ((held_out < high) if high < 1.0 else (held_out <= high))
        if inside.any():
            shares = f"{held_out[inside].mean():.3f} | {evidence[inside].mean():.3f}"
            print(f"| {low:.2f}-{high:.2f} | {inside.sum()} | {shares} |")

    had = {q for q, e in zip(question.tolist(), evidence.tolist(), strict=True) if e}
    foreign_questions = {hit.question for hit in foreign}
    print(
        "\n| min_score | evidence hits kept | other hits dropped | questions keeping evidence | hits/question "
        "| foreign hits dropped | foreign questions with no hit |"
    )
    print("|---|---|---|---|---|---|---|")
    for threshold in THRESHOLDS:
        kept = score >= threshold
        keeping = {q for q, e, s in zip(question.tolist(), evidence.tolist(), kept.tolist(), strict=True) if e and s}
        answered = {hit.question for hit in foreign if hit.score >= threshold}
        strangers = (
            f"{(foreign_score < threshold).mean():.1%} | {1 - len(answered) / len(foreign_questions):.1%}"
            if foreign
            else "(none) | (none)"
        )
        print(
            f"| {threshold:.2f} | {kept[evidence].mean():.1%} | {(~kept[~evidence]).mean():.1%} | "
            f"{len(keeping) / max(1, len(had)):.1%} | {kept.sum() / asked:.2f} | {strangers} |"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="locomo")
    parser.add_argument("--data-dir", default=None, help="an epimem data folder, kept and reused (default: temporary)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--dump", default=None, help="write every hit to this JSON Lines file")
    parser.add_argument("--quick", action="store_true", help="the first sessions of one conversation per dataset")
    args = parser.parse_args(argv)

    from api.facade import Epimem

    found: list[Hit] = []
    with tempfile.TemporaryDirectory(prefix="epimem-scores-") as scratch:
        service = Epimem.from_settings(data_dir=Path(args.data_dir or scratch), background=False)
        try:
            for name in args.datasets.split(","):
                samples = load_dataset(name, quick=args.quick)
                if args.quick and not samples:  # the shipped examples hold no conv-30: their first conversation
                    samples = [cut(sample, QUICK_SESSIONS) for sample in load_dataset(name)[:1]]
                ingest(service, samples)
                hits = collect(name, service, samples, args.k)
                report(name, hits, args.k)
                found += hits
        finally:
            service.close()
    if args.dump:
        Path(args.dump).write_text("".join(json.dumps(asdict(hit)) + "\n" for hit in found), encoding="utf-8")


if __name__ == "__main__":
    main()
