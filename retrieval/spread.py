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
  over more stretches of the conversation);
- ``echo`` w (issue 29, fifth pass: the first mention): by w x (c - f) / (1 - f), where c is its greatest cosine
  with an *earlier* message among those offered, of another episode, and f the ``echo_floor``: a later message
  that restates an earlier one counts less than the original (fixed before packing, whatever is packed);
- ``primacy`` t: by t x the share of the messages offered that are older than it (0 for the oldest, t for the
  newest): of two near-equal matches the older one goes first.

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
    times: Sequence[float] = (),
    echo: float = 0.0,
    echo_floor: float = 0.5,
    primacy: float = 0.0,
    take: Callable[[int], bool],
) -> list[int]:
    """Offer item n (``take(n)``: True when it was packed) in the order of its lowered score, best first;
    ties by position. Items: one per message, with its score, its episode, its day, (for ``redundancy`` and
    ``echo``) its unit vector and (for ``echo`` and ``primacy``) its time. Returns the items packed, in the order
    they were."""
    packed: list[int] = []
    per_day: Counter[tuple[str, str]] = Counter()  # (day, episode) -> packed messages
    day_total: Counter[str] = Counter()
    per_episode: Counter[str] = Counter()
    static = [
        float(score) - (length_penalty * lengths[n] / 100 if length_penalty else 0.0) for n, score in enumerate(scores)
    ]
    if (echo and vectors is not None) or primacy:
        lowered_by = first_mention(episodes, times, vectors, echo=echo, floor=echo_floor, primacy=primacy)
        static = [value - float(lowered_by[n]) for n, value in enumerate(static)]
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


def first_mention(
    episodes: Sequence[str],
    times: Sequence[float],
    vectors: np.ndarray | None,
    *,
    echo: float,
    floor: float,
    primacy: float,
) -> np.ndarray:
    """What ``echo`` and ``primacy`` take from each item (spread_order): echo x the item's greatest likeness
    above ``floor`` with an earlier item of another episode, scaled to 1 for an exact repeat, plus primacy x
    the share of the items older than it."""
    count = len(episodes)
    taken = np.zeros(count)
    if not count:
        return taken
    moments = np.asarray(times, dtype=np.float64)
    if primacy and count > 1:
        older = np.searchsorted(np.sort(moments), moments, side="left")
        taken += primacy * older / (count - 1)
    if echo and vectors is not None:
        likeness = np.asarray(vectors @ vectors.T, dtype=np.float64)
        owner = np.unique(np.asarray(episodes, dtype=object), return_inverse=True)[1]
        earlier = (moments[None, :] < moments[:, None]) & (owner[None, :] != owner[:, None])
        greatest = np.where(earlier, likeness, -np.inf).max(axis=1)
        taken += echo * np.maximum(0.0, greatest - floor) / (1.0 - floor)
    return taken
