"""Fit the topic-shift scorer of memory/episodes/boundaries.py on TIAGE's training labels and write its weights.

    python tests/benchmarks/fit_boundaries.py [--data DIR] [--out memory/episodes/boundary_weights.py] [--folds 5]

Uses ``anno_train.json`` ONLY (dev is for reporting, test is kept aside). Everything the segmenter
learns from TIAGE is chosen by cross-validation inside train (folds by dialogue, ``i % folds``):

- the weights: an L2-penalised logistic regression (plain numpy, Newton steps, standardised
  features) on the per-gap features of memory.episodes.boundaries; its penalty from :data:`L2_GRID`;
- the granularity: the selection threshold (in log-odds) and the smallest segment (1 or 2 turns) the
  dynamic programme of memory.episodes.segmentation may place, with segments at most 12 turns.

Each setting is scored on the out-of-fold logits (every training dialogue scored by a model that
never saw it); the setting with the best cross-validated boundary F1 is kept, the model is refitted
on the whole of train with its penalty, and the weights, the threshold, the minimum and the
cross-validated AP / F1 / Pk of that setting are written (tests/benchmarks/tiage.py prints them
beside the dev figures). Deterministic: the same data gives the same file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiage  # noqa: E402
from _common import ROOT  # noqa: E402

from memory.episodes.boundaries import FEATURES, gap_features  # noqa: E402
from memory.episodes.segmentation import choose_cuts  # noqa: E402

L2_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
MIN_GRID = (1, 2)
THRESHOLDS = np.round(np.arange(-2.0, 2.0001, 0.05), 2)


@dataclass(frozen=True)
class Setting:
    l2: float
    min_messages: int
    threshold: float
    ap: float
    f1: float
    pk: float
    windowdiff: float


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, coefficients, intercept) of an L2-penalised logistic regression."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.c_[(x - mean) / scale, np.ones(len(x))]
    penalty = l2 * np.diag(np.r_[np.ones(z.shape[1] - 1), 0.0])
    w = np.zeros(z.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        step = np.linalg.solve((z * (p * (1 - p))[:, None]).T @ z + penalty, z.T @ (p - y) + penalty @ w)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return mean, scale, w[:-1], float(w[-1])


Fitted = tuple[np.ndarray, np.ndarray, np.ndarray, float]  # mean, scale, coefficients, intercept


def logits_of(features: Sequence[np.ndarray], fitted: Fitted) -> list[np.ndarray]:
    mean, scale, coef, intercept = fitted
    return [((f - mean) / scale) @ coef + intercept for f in features]


def out_of_fold_logits(
    features: Sequence[np.ndarray], labels: Sequence[Sequence[int]], l2: float, folds: int
) -> list[np.ndarray]:
    """Each dialogue's logits from a model fitted on the other folds (fold of dialogue i: i % folds)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(features)
    for fold in range(folds):
        train = [i for i in range(len(features)) if i % folds != fold]
        held = [i for i in range(len(features)) if i % folds == fold]
        fitted = fit_logistic(
            np.concatenate([features[i] for i in train]),
            np.concatenate([labels[i] for i in train]).astype(float),
            l2,
        )
        for i, z in zip(held, logits_of([features[i] for i in held], fitted), strict=True):
            out[i] = z
    return out


def cut_labels(logits: Sequence[np.ndarray], threshold: float, min_messages: int) -> list[list[int]]:
    """The chosen boundaries (one 0/1 per gap) of each dialogue at this threshold and minimum."""
    hyp = []
    for z in logits:
        cuts = set(choose_cuts(z - threshold, min_messages, tiage.BENCH_MAX))
        hyp.append([int(g in cuts) for g in range(1, len(z) + 1)])
    return hyp


def evaluate(
    logits: Sequence[np.ndarray], gold: Sequence[Sequence[int]], threshold: float, min_messages: int
) -> dict[str, float]:
    """AP of the logits, and Pk / WindowDiff / F1 of the boundaries chosen at (threshold, minimum)."""
    scores = tiage.segmentation_scores(gold, cut_labels(logits, threshold, min_messages))
    scores["ap"] = tiage.average_precision(np.concatenate(logits), np.concatenate(gold).astype(float))
    return scores


def cross_validate(
    features: Sequence[np.ndarray], gold: Sequence[Sequence[int]], folds: int
) -> tuple[Setting, list[Setting]]:
    """Every (penalty, minimum, threshold) scored out of fold; the best by F1 (then Pk), and the best
    setting of each penalty (for the printout)."""
    best_per_l2: list[Setting] = []
    for l2 in L2_GRID:
        logits = out_of_fold_logits(features, gold, l2, folds)
        ap = tiage.average_precision(np.concatenate(logits), np.concatenate(gold).astype(float))
        candidates = []
        for min_messages in MIN_GRID:
            for threshold in THRESHOLDS:
                s = tiage.segmentation_scores(gold, cut_labels(logits, float(threshold), min_messages))
                candidates.append(Setting(l2, min_messages, float(threshold), ap, s["f1"], s["pk"], s["windowdiff"]))
        best_per_l2.append(max(candidates, key=lambda c: (round(c.f1, 9), -c.pk)))
    return max(best_per_l2, key=lambda c: (round(c.f1, 9), -c.pk)), best_per_l2


def render(mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float, **extra: float | int) -> str:
    def floats(name: str, values: np.ndarray) -> list[str]:
        rows = [f"    {value:.6g},  # {feature}" for value, feature in zip(values, FEATURES, strict=True)]
        return [f"{name}: list[float] = [", *rows, "]"]

    lines = [
        '"""Weights of the topic-shift scorer (memory.episodes.boundaries). Written by',
        "tests/benchmarks/fit_boundaries.py from TIAGE anno_train.json only (penalty, THRESHOLD and",
        "MIN_MESSAGES chosen by cross-validation inside train; CV_* are those out-of-fold figures);",
        'do not edit by hand."""',
        "",
        *floats("MEAN", mean),
        *floats("SCALE", scale),
        *floats("COEFFICIENTS", coef),
        f"INTERCEPT = {intercept:.6g}",
    ]
    lines += [f"{key.upper()} = {value if isinstance(value, int) else f'{value:.6g}'}" for key, value in extra.items()]
    return "\n".join([*lines, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=tiage.DEFAULT_DATA, help="folder with anno_train.json")
    parser.add_argument("--out", type=Path, default=ROOT / "memory" / "episodes" / "boundary_weights.py")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()

    dialogues = tiage.load(args.data / "anno_train.json")
    vectors = tiage.embed_dialogues(dialogues)
    features = [gap_features(d.turns(), v) for d, v in zip(dialogues, vectors, strict=True)]
    gold = [d.labels for d in dialogues]
    labels = np.concatenate(gold).astype(float)

    best, per_l2 = cross_validate(features, gold, args.folds)
    print(f"{args.folds}-fold cross-validation inside train (best threshold and minimum per penalty):")
    for s in per_l2:
        mark = "  <- chosen" if s == best else ""
        print(
            f"  L2 {s.l2:>6g}: AP {s.ap:.3f}, min {s.min_messages}, threshold {s.threshold:+.2f}: "
            f"F1 {s.f1:.3f} Pk {s.pk:.3f} WindowDiff {s.windowdiff:.3f}{mark}"
        )
    mean, scale, coef, intercept = fit_logistic(np.concatenate(features), labels, best.l2)
    for name, value in zip(FEATURES, coef, strict=True):
        print(f"  {name:<20} {value:+.3f}")
    in_sample = evaluate(logits_of(features, (mean, scale, coef, intercept)), gold, best.threshold, best.min_messages)
    print(
        f"train: {len(dialogues)} dialogues, {len(labels)} gaps; refitted on all of train, in sample: "
        f"AP {in_sample['ap']:.3f} F1 {in_sample['f1']:.3f} Pk {in_sample['pk']:.3f}"
    )
    args.out.write_text(
        render(
            mean,
            scale,
            coef,
            intercept,
            base_rate=float(labels.mean()),
            threshold=best.threshold,
            min_messages=best.min_messages,
            l2=best.l2,
            cv_ap=best.ap,
            cv_f1=best.f1,
            cv_pk=best.pk,
            cv_windowdiff=best.windowdiff,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
