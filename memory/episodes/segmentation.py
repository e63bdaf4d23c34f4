"""Boundary detection: cut a session's pending messages into segments, each with its reason.

Score every gap, then choose (``method="scored"``, the default):

1. a time gap longer than ``time_gap`` between two messages is a hard boundary (``time_gap``);
2. every other gap gets a topic-shift score from :mod:`memory.episodes.boundaries` (embeddings, lexical
   cues, speaker and question/answer structure, pauses);
3. inside each stretch between time gaps, the cuts are chosen together by dynamic programming:
   the set of cuts that maximises the sum of (gap log-odds - a threshold) while no segment is
   longer than ``max_messages`` and, where the stretch allows it, none shorter than
   ``min_messages``. The threshold follows ``target_messages`` (the typical episode length aimed
   for): a prior shift of the fitted log-odds from TIAGE's base rate to ``1 / target_messages``.
   A chosen cut whose score clears the threshold ends its segment with ``topic_shift``; one that
   only the size bound forced ends it with ``max_size``.

``method="window"`` keeps the rule used before: cut where the cosine of the 3-message windows on
each side falls below ``topic_shift_threshold``, or at ``max_messages``.

No message is ever dropped; the last segment ends with ``final_reason`` (flush, end of session).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol

import numpy as np

from memory.episodes import boundary_weights as weights
from memory.episodes.boundaries import Turn, gap_logits
from memory.models import BoundaryReason, Message, Segment

Vectors = np.ndarray | None  # one normalised row per message, in the messages' order
FLUSH = BoundaryReason.FLUSH
SHORT_SEGMENT_PENALTY = 1e6  # a segment under min_messages only where a stretch cannot be cut otherwise


@dataclass(frozen=True, kw_only=True)
class SegmentationPolicy:
    min_messages: int = 2
    max_messages: int = 12
    time_gap: timedelta = timedelta(minutes=30)
    method: Literal["scored", "window"] = "scored"
    target_messages: float = 6.0
    topic_shift_threshold: float = 0.15
    topic_window: int = 3


@dataclass(frozen=True)
class GapDecision:
    """The gap between ``after`` and ``before`` (consecutive in event time): its topic-shift score
    (0-1; 1.0 for a time gap) and, where an episode ends there, why."""

    after: Message
    before: Message
    score: float
    reason: BoundaryReason | None

    @property
    def boundary(self) -> bool:
        return self.reason is not None


class Segmenter(Protocol):
    """Cuts a session's pending messages into segments. Every message is in exactly one segment,
    segments are in event-time order, and the last one ends with ``final_reason``."""

    def segment(
        self, messages: Sequence[Message], *, vectors: Vectors = None, final_reason: BoundaryReason = FLUSH
    ) -> list[Segment]: ...


class HeuristicSegmenter:
    """Time gaps, size limits and topic shift (scored gaps, or window similarity); no LLM."""

    def __init__(self, policy: SegmentationPolicy) -> None:
        self.policy = policy

    def segment(
        self, messages: Sequence[Message], *, vectors: Vectors = None, final_reason: BoundaryReason = FLUSH
    ) -> list[Segment]:
        return split_messages(messages, policy=self.policy, vectors=vectors, final_reason=final_reason)


def topic_similarity(vectors: np.ndarray, cut: int, window: int) -> float:
    """Cosine similarity of the mean vectors of the windows before and after index ``cut``."""
    before = vectors[max(0, cut - window) : cut].mean(axis=0)
    after = vectors[cut : cut + window].mean(axis=0)
    norm = float(np.linalg.norm(before) * np.linalg.norm(after))
    return float(before @ after / norm) if norm else 1.0


def selection_threshold(target_messages: float) -> float:
    """The log-odds a gap must clear to be a topic boundary for episodes of about ``target_messages``."""
    target_rate = 1.0 / max(1.0 + 1e-6, target_messages)
    return weights.THRESHOLD + _logit(weights.BASE_RATE) - _logit(target_rate)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def decide_gaps(
    messages: Sequence[Message], *, policy: SegmentationPolicy, vectors: np.ndarray | None = None
) -> list[GapDecision]:
    """Every gap between consecutive messages (in event-time order), scored, with its decision."""
    if vectors is not None and len(vectors) != len(messages):
        raise ValueError("one vector per message is required")
    order = sorted(range(len(messages)), key=lambda index: messages[index].timestamp)
    ordered = [messages[index] for index in order]
    ordered_vectors = np.asarray(vectors)[order] if vectors is not None else None
    if len(ordered) < 2:
        return []
    hard = [ordered[i].timestamp - ordered[i - 1].timestamp > policy.time_gap for i in range(1, len(ordered))]
    if policy.method == "window":
        scores, reasons = _window_rule(ordered, ordered_vectors, hard, policy)
    else:
        scores, reasons = _scored_rule(ordered, ordered_vectors, hard, policy)
    return [
        GapDecision(after=ordered[i - 1], before=ordered[i], score=scores[i - 1], reason=reasons[i - 1])
        for i in range(1, len(ordered))
    ]


def _scored_rule(
    ordered: list[Message], vectors: np.ndarray | None, hard: list[bool], policy: SegmentationPolicy
) -> tuple[list[float], list[BoundaryReason | None]]:
    if vectors is None:  # nothing to score topics with: only time gaps and the size bound cut
        logits = np.full(len(hard), -50.0)
    else:
        turns = [Turn(text=m.content, speaker=m.speaker, timestamp=m.timestamp) for m in ordered]
        logits = gap_logits(turns, vectors)
    threshold = selection_threshold(policy.target_messages)
    reasons: list[BoundaryReason | None] = [BoundaryReason.TIME_GAP if h else None for h in hard]
    starts = [0] + [i + 1 for i, h in enumerate(hard) if h]
    ends = starts[1:] + [len(ordered)]
    for start, end in zip(starts, ends, strict=True):
        # gaps inside the stretch: gap g (before message g) has index g - 1 in logits
        for cut in choose_cuts(logits[start : end - 1] - threshold, policy.min_messages, policy.max_messages):
            gap = start + cut - 1
            reasons[gap] = BoundaryReason.TOPIC_SHIFT if logits[gap] >= threshold else BoundaryReason.MAX_SIZE
    scores = [1.0 if h else float(1.0 / (1.0 + math.exp(-logit))) for h, logit in zip(hard, logits, strict=True)]
    return scores, reasons


def choose_cuts(gains: np.ndarray, min_size: int, max_size: int) -> list[int]:
    """The cut positions (1..n-1, before message i) of a stretch of ``n = len(gains) + 1`` messages
    that maximise the sum of the gains of the chosen gaps, with every segment at most ``max_size``
    long and, where possible, at least ``min_size``. Ties prefer longer first segments."""
    n = len(gains) + 1
    best = [0.0] * (n + 1)  # best[i]: the best total for messages i..n-1
    step = [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i] = -math.inf
        for j in range(min(n, i + max_size), i, -1):
            value = best[j] + (float(gains[j - 1]) if j < n else 0.0)
            if j - i < min_size:
                value -= SHORT_SEGMENT_PENALTY
            if value > best[i] + 1e-12:
                best[i], step[i] = value, j
    cuts, i = [], 0
    while step[i] < n:
        i = step[i]
        cuts.append(i)
    return cuts


def _window_rule(
    ordered: list[Message], vectors: np.ndarray | None, hard: list[bool], policy: SegmentationPolicy
) -> tuple[list[float], list[BoundaryReason | None]]:
    """The rule before issue 19: greedy cuts on window similarity, then short pieces merged."""
    scores = [
        1.0
        if hard[i - 1]
        else (1.0 - topic_similarity(vectors, i, policy.topic_window) if vectors is not None else 0.0)
        for i in range(1, len(ordered))
    ]
    cuts: list[tuple[int, BoundaryReason]] = []
    start = 0
    for index in range(1, len(ordered)):
        size = index - start
        reason: BoundaryReason | None = None
        if hard[index - 1]:
            reason = BoundaryReason.TIME_GAP
        elif size >= policy.max_messages:
            reason = BoundaryReason.MAX_SIZE
        elif (
            vectors is not None
            and size >= policy.min_messages
            and len(ordered) - index >= policy.min_messages
            and 1.0 - scores[index - 1] < policy.topic_shift_threshold
        ):
            reason = BoundaryReason.TOPIC_SHIFT
        if reason is not None:
            cuts.append((index, reason))
            start = index
    return scores, _merge_short(len(ordered), cuts, policy)


def _merge_short(
    count: int, cuts: list[tuple[int, BoundaryReason]], policy: SegmentationPolicy
) -> list[BoundaryReason | None]:
    """A piece shorter than the minimum joins the one before it, unless a time gap separates them."""
    bounds = [0] + [index for index, _ in cuts] + [count]
    kept: list[tuple[int, BoundaryReason]] = []  # (start of the piece, reason of the cut before it)
    for i, (cut, reason) in enumerate(cuts):
        previous_start = kept[-1][0] if kept else 0
        piece = bounds[i + 2] - cut
        joined = bounds[i + 2] - previous_start
        if piece < policy.min_messages and reason is not BoundaryReason.TIME_GAP and joined <= policy.max_messages:
            # the piece joins its predecessor: the predecessor now ends with this piece's own end
            continue
        kept.append((cut, reason))
    reasons: list[BoundaryReason | None] = [None] * (count - 1)
    for cut, reason in kept:
        reasons[cut - 1] = reason
    return reasons


def split_messages(
    messages: Sequence[Message],
    *,
    policy: SegmentationPolicy,
    vectors: np.ndarray | None = None,
    final_reason: BoundaryReason = BoundaryReason.FLUSH,
) -> list[Segment]:
    """Heuristic segmenter. ``vectors`` (one normalised row per message, same order) enable topic cuts.

    The last segment gets ``final_reason``: it ends because the caller flushed or closed the session.
    """
    if not messages:
        return []
    decisions = decide_gaps(messages, policy=policy, vectors=vectors)
    ordered = [decisions[0].after] + [d.before for d in decisions] if decisions else list(messages)
    segments: list[Segment] = []
    current: list[Message] = [ordered[0]]
    for decision in decisions:
        if decision.reason is not None:
            segments.append(Segment(messages=tuple(current), boundary_reason=decision.reason))
            current = []
        current.append(decision.before)
    segments.append(Segment(messages=tuple(current), boundary_reason=final_reason))
    return segments
