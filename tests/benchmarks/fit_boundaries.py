"""Fit the topic-shift scorer of memory/episodes/boundaries.py on TIAGE's training labels and write its weights.

    python tests/benchmarks/fit_boundaries.py [--data DIR] [--out memory/episodes/boundary_weights.py]

Uses ``anno_train.json`` ONLY (dev is for reporting, test is kept aside): a logistic regression
(plain numpy, Newton steps, L2 penalty 1.0 on standardised features) on the per-gap features of
memory.episodes.boundaries, then the selection threshold (in log-odds) that gives the best boundary F1 on
train with the benchmark's size bounds. Deterministic: the same data gives the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiage  # noqa: E402
from _common import ROOT  # noqa: E402

from memory.episodes.boundaries import FEATURES, gap_features  # noqa: E402
from memory.episodes.segmentation import choose_cuts  # noqa: E402

L2 = 1.0


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
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


def best_threshold(logits: list[np.ndarray], gold: list[list[int]]) -> tuple[float, float]:
    """(threshold, F1 on train) over a grid, with the benchmark's size bounds."""
    best = (0.0, -1.0)
    for threshold in np.round(np.arange(-2.0, 2.0001, 0.05), 2):
        hyp = []
        for z in logits:
            cuts = set(choose_cuts(z - threshold, tiage.BENCH_MIN, tiage.BENCH_MAX))
            hyp.append([int(g in cuts) for g in range(1, len(z) + 1)])
        f1 = tiage.segmentation_scores(gold, hyp)["f1"]
        if f1 > best[1] + 1e-9:
            best = (float(threshold), f1)
    return best


def render(mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float, **extra: float) -> str:
    def floats(name: str, values: np.ndarray) -> list[str]:
        rows = [f"    {value:.6g},  # {feature}" for value, feature in zip(values, FEATURES, strict=True)]
        return [f"{name}: list[float] = [", *rows, "]"]

    lines = [
        '"""Weights of the topic-shift scorer (memory.episodes.boundaries). Written by',
        'tests/benchmarks/fit_boundaries.py from TIAGE anno_train.json only; do not edit by hand."""',
        "",
        *floats("MEAN", mean),
        *floats("SCALE", scale),
        *floats("COEFFICIENTS", coef),
        f"INTERCEPT = {intercept:.6g}",
    ]
    lines += [f"{key.upper()} = {value:.6g}" for key, value in extra.items()]
    return "\n".join([*lines, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=tiage.DEFAULT_DATA, help="folder with anno_train.json")
    parser.add_argument("--out", type=Path, default=ROOT / "memory" / "boundary_weights.py")
    args = parser.parse_args()

    dialogues = tiage.load(args.data / "anno_train.json")
    vectors = tiage.embed_dialogues(dialogues)
    features = [gap_features(d.turns(), v) for d, v in zip(dialogues, vectors, strict=True)]
    labels = np.concatenate([d.labels for d in dialogues]).astype(float)
    mean, scale, coef, intercept = fit_logistic(np.concatenate(features), labels)
    logits = [((f - mean) / scale) @ coef + intercept for f in features]
    ap = tiage.average_precision(np.concatenate(logits), labels)
    threshold, f1 = best_threshold(logits, [d.labels for d in dialogues])
    for name, value in zip(FEATURES, coef, strict=True):
        print(f"  {name:<20} {value:+.3f}")
    print(
        f"train: {len(dialogues)} dialogues, {len(labels)} gaps, AP = {ap:.3f}, "
        f"threshold {threshold:+.2f} F1 = {f1:.3f}"
    )
    args.out.write_text(render(mean, scale, coef, intercept, base_rate=float(labels.mean()), threshold=threshold))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
