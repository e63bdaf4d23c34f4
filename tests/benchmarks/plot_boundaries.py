"""Draw one LoCoMo session's gap scores and the boundaries chosen (docs/images/episode-boundaries.png).

    python tests/benchmarks/plot_boundaries.py [--data PATH] [--sample conv-26] [--session session_8] [--out PNG]

Bars: the topic-shift score of every gap (memory.episodes.boundaries); dashed line: the score a gap must
reach on its own with the default target; coloured lines: where episodes end with the default
settings (topic_shift / max_size / time_gap); crosses: where the rule before issue 19 cut.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import matplotlib  # noqa: E402
from _common import LOCOMO, ROOT  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from memory.embedding.embedder import SentenceTransformerEmbedder  # noqa: E402
from memory.episodes.segmentation import SegmentationPolicy, decide_gaps, selection_threshold  # noqa: E402
from memory.ingest.importers import read_locomo  # noqa: E402
from memory.models import BoundaryReason  # noqa: E402
from memory.text import message_line  # noqa: E402

COLOURS = {BoundaryReason.TOPIC_SHIFT: "tab:red", BoundaryReason.MAX_SIZE: "tab:orange", BoundaryReason.TIME_GAP: "k"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=LOCOMO)
    parser.add_argument("--sample", default="conv-26")
    parser.add_argument("--session", default="session_8")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "episode-boundaries.png")
    args = parser.parse_args()

    sample = next(s for s in read_locomo(args.data) if s.sample_id == args.sample)
    messages = sample.sessions[args.session]
    vectors = SentenceTransformerEmbedder(device="cpu").embed_batch([message_line(m) for m in messages])
    policy = SegmentationPolicy()
    scored = decide_gaps(messages, policy=policy, vectors=vectors)
    before = decide_gaps(messages, policy=SegmentationPolicy(method="window"), vectors=vectors)

    positions = np.arange(1, len(messages))
    fig, ax = plt.subplots(figsize=(11, 3.6), dpi=110)
    ax.bar(positions, [d.score for d in scored], color="tab:blue", alpha=0.55, label="topic-shift score of the gap")
    cutoff = 1 / (1 + np.exp(-selection_threshold(policy.target_messages)))
    ax.axhline(
        cutoff, color="grey", linestyle="--", linewidth=1, label=f"threshold (target {policy.target_messages:g})"
    )
    for position, decision in zip(positions, scored, strict=True):
        if decision.reason is not None:
            ax.axvline(position, color=COLOURS[decision.reason], linewidth=2)
    for reason, colour in COLOURS.items():
        if any(d.reason is reason for d in scored):
            ax.plot([], [], color=colour, linewidth=2, label=f"episode ends: {reason.value}")
    old = [p for p, d in zip(positions, before, strict=True) if d.reason is not None]
    ax.scatter(old, [1.02] * len(old), marker="x", color="k", label="cut by the rule before (window)", zorder=3)
    ax.set_xlim(0.3, len(messages) - 0.3)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel(f"gap before message n ({sample.sample_id} {args.session}, {len(messages)} messages)")
    ax.set_ylabel("score")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    sizes = np.diff([0, *[p for p, d in zip(positions, scored, strict=True) if d.reason], len(messages)])
    print(f"wrote {args.out}: {len(messages)} messages, episodes of {sizes.tolist()} messages")


if __name__ == "__main__":
    main()
