"""The order messages are offered to the context's packer: best score first, each score lowered by

- ``length_penalty`` l: l x its length in hundreds of characters (more, shorter messages in the budget);
- ``primacy`` t: t x the share of the messages offered that are older than it (0 for the oldest, t for the
  newest): of two near-equal matches the older one goes first.

Neither depends on what is already packed, so the order is one sort (ties by position).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def packing_order(
    scores: Sequence[float],
    *,
    lengths: Sequence[int] = (),
    length_penalty: float = 0.0,
    times: Sequence[float] = (),
    primacy: float = 0.0,
) -> list[int]:
    """The positions of ``scores`` in the order they are offered (``lengths`` in characters and, for
    ``primacy``, ``times`` in seconds, one per score)."""
    lowered = [
        float(score) - (length_penalty * lengths[n] / 100 if length_penalty else 0.0) for n, score in enumerate(scores)
    ]
    if primacy and len(lowered) > 1:
        moments = np.asarray(times, dtype=np.float64)
        older = np.searchsorted(np.sort(moments), moments, side="left")
        taken = primacy * older / (len(lowered) - 1)
        lowered = [value - float(taken[n]) for n, value in enumerate(lowered)]
    return sorted(range(len(lowered)), key=lambda n: (-lowered[n], n))
