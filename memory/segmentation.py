"""Boundary detection: cut a session's pending messages into segments, each with its reason.

No message is ever dropped: a segment shorter than ``min_messages`` is merged into its
neighbour unless a time gap separates them, in which case it stays a short episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

import numpy as np

from memory.models import BoundaryReason, Message, Segment


@dataclass(frozen=True, kw_only=True)
class SegmentationPolicy:
    min_messages: int = 2
    max_messages: int = 12
    time_gap: timedelta = timedelta(minutes=30)
    topic_shift_threshold: float = 0.15
    topic_window: int = 3


class Segmenter(Protocol):
    """Cuts a session's pending messages into segments. Every message is in exactly one segment,
    segments are in event-time order, and the last one ends with ``final_reason``."""

    def segment(
        self,
        messages: Sequence[Message],
        *,
        vectors: np.ndarray | None = None,
        final_reason: BoundaryReason = BoundaryReason.FLUSH,
    ) -> list[Segment]: ...


class HeuristicSegmenter:
    """Time gaps, size limits and topic shift (embedding similarity); no LLM."""

    def __init__(self, policy: SegmentationPolicy) -> None:
        self.policy = policy

    def segment(
        self,
        messages: Sequence[Message],
        *,
        vectors: np.ndarray | None = None,
        final_reason: BoundaryReason = BoundaryReason.FLUSH,
    ) -> list[Segment]:
        return split_messages(messages, policy=self.policy, vectors=vectors, final_reason=final_reason)


def order_messages(messages: Sequence[Message]) -> list[Message]:
    """Event-time order; ties keep arrival order (sort is stable)."""
    return sorted(messages, key=lambda message: message.timestamp)


def topic_similarity(vectors: np.ndarray, cut: int, window: int) -> float:
    """Cosine similarity of the mean vectors of the windows before and after index ``cut``."""
    before = vectors[max(0, cut - window) : cut].mean(axis=0)
    after = vectors[cut : cut + window].mean(axis=0)
    norm = float(np.linalg.norm(before) * np.linalg.norm(after))
    return float(before @ after / norm) if norm else 1.0


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
    if vectors is not None and len(vectors) != len(messages):
        raise ValueError("one vector per message is required")
    order = sorted(range(len(messages)), key=lambda index: messages[index].timestamp)
    ordered = [messages[index] for index in order]
    ordered_vectors = vectors[order] if vectors is not None else None

    cuts: list[tuple[int, BoundaryReason]] = []
    start = 0
    for index in range(1, len(ordered)):
        size = index - start
        reason: BoundaryReason | None = None
        if ordered[index].timestamp - ordered[index - 1].timestamp > policy.time_gap:
            reason = BoundaryReason.TIME_GAP
        elif size >= policy.max_messages:
            reason = BoundaryReason.MAX_SIZE
        elif (
            ordered_vectors is not None
            and size >= policy.min_messages
            and len(ordered) - index >= policy.min_messages
            and topic_similarity(ordered_vectors, index, policy.topic_window) < policy.topic_shift_threshold
        ):
            reason = BoundaryReason.TOPIC_SHIFT
        if reason is not None:
            cuts.append((index, reason))
            start = index
    return _build_segments(ordered, cuts, policy=policy, final_reason=final_reason)


def _build_segments(
    ordered: list[Message],
    cuts: list[tuple[int, BoundaryReason]],
    *,
    policy: SegmentationPolicy,
    final_reason: BoundaryReason,
) -> list[Segment]:
    bounds = [0] + [index for index, _ in cuts] + [len(ordered)]
    # The reason of a segment is why it ended: the cut after it, or the final reason.
    reasons = [reason for _, reason in cuts] + [final_reason]
    pieces: list[tuple[list[Message], BoundaryReason]] = [
        (ordered[bounds[i] : bounds[i + 1]], reasons[i]) for i in range(len(reasons))
    ]
    merged: list[tuple[list[Message], BoundaryReason]] = []
    for piece, reason in pieces:
        previous = merged[-1] if merged else None
        short = len(piece) < policy.min_messages
        if (
            previous is not None
            and short
            and previous[1] is not BoundaryReason.TIME_GAP
            and len(previous[0]) + len(piece) <= policy.max_messages
        ):
            merged[-1] = (previous[0] + piece, reason)
        else:
            merged.append((piece, reason))
    return [Segment(messages=tuple(piece), boundary_reason=reason) for piece, reason in merged]


def closed_segments(segments: list[Segment]) -> tuple[list[Segment], list[Segment]]:
    """Split into segments that are complete (a later cut closed them) and the still-open tail."""
    if not segments:
        return [], []
    last = segments[-1]
    return segments[:-1], [last]
