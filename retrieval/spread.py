"""The order messages are offered to the context's packer when what is already packed lowers the rest.

Plain packing offers messages best score first. Here (issue 29, long chats) a message's score is lowered
while the context fills:

- ``redundancy`` r: by r x (c - f) / (1 - f), where c is its greatest cosine with a message already packed
  from another episode and f the ``floor`` below which a likeness does not count (maximal marginal relevance:
  a message that repeats what the context already holds yields to one that adds something; r is what an
  exact repeat loses);
- ``day_spread`` d: by d x the number of messages already packed from other episodes of its day (a share
  of the budget per period: one busy day of talk about the same people does not fill the context);
- ``length_penalty`` l: by l x its length in hundreds of characters (more, shorter messages in the budget);
- ``episode_spread`` e: by e x the number of messages already packed from its own episode (the budget spread
  over more stretches of the conversation).

Penalties only grow as the context fills, so the greedy choice is exact with a lazy heap: a message whose
lowered score is stale is pushed back with the fresh one and offered when it is again the best.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np


def spread_order(
    scores: Sequence[float],
    episodes: Sequence[str],
    days: Sequence[str],
    vectors: np.ndarray | None,
    *,
    redundancy: float,
    day_spread: float,
    floor: float = 0.0,
    episode_spread: float = 0.0,
    lengths: Sequence[int] = (),
    length_penalty: float = 0.0,
    take: Callable[[int], bool],
) -> list[int]:
    """Offer item n (``take(n)``: True when it was packed) in the order of its lowered score, best first;
    ties by position. Items: one per message, with its score, its episode, its day and (for ``redundancy``)
    its unit vector. Returns the items packed, in the order they were."""
    packed: list[int] = []
    per_day: Counter[tuple[str, str]] = Counter()  # (day, episode) -> packed messages
    day_total: Counter[str] = Counter()
    per_episode: Counter[str] = Counter()
    static = [
        float(score) - (length_penalty * lengths[n] / 100 if length_penalty else 0.0) for n, score in enumerate(scores)
    ]
    if not (redundancy or day_spread or episode_spread):  # nothing depends on what is packed: one sort
        for n in sorted(range(len(static)), key=lambda n: (-static[n], n)):
            if take(n):
                packed.append(n)
        return packed
    heap = [(-value, n, 0) for n, value in enumerate(static)]
    heapq.heapify(heap)

    def lowered(n: int) -> float:
        value = static[n]
        if day_spread:
            value -= day_spread * (day_total[days[n]] - per_day[(days[n], episodes[n])])
        if episode_spread:
            value -= episode_spread * per_episode[episodes[n]]
        if redundancy and vectors is not None and packed:
            others = [m for m in packed if episodes[m] != episodes[n]]
            if others:
                likeness = float(np.max(vectors[others] @ vectors[n]))
                value -= redundancy * max(0.0, likeness - floor) / (1.0 - floor)
        return value

    while heap:
        value, n, seen = heapq.heappop(heap)
        if seen != len(packed):  # packed has grown since this value was computed
            fresh = lowered(n)
            if fresh < -value:
                heapq.heappush(heap, (-fresh, n, len(packed)))
                continue
        if take(n):
            packed.append(n)
            per_day[(days[n], episodes[n])] += 1
            day_total[days[n]] += 1
            per_episode[episodes[n]] += 1
    return packed
