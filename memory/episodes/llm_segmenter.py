"""An LLM segmenter: the model picks episode boundaries, the heuristic segmenter takes over when it fails.

Time gaps longer than the policy's are hard cuts made before asking (the LLM never sees two
stretches separated by a long pause as one). Each stretch goes to the LLM in windows of
``window`` messages; the model answers 1-based message indices and a topic per segment. The
last segment of a window that is followed by more messages is carried into the next window,
so windows never cut a topic in half. An answer that does not cover every message of the
window exactly once, in order, is rejected and that window is segmented heuristically.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from memory.episodes.prompts import PROMPT_VERSION, segmenter_messages
from memory.episodes.segmentation import FLUSH, SegmentationPolicy, Vectors, split_messages
from memory.llm.client import LLMClient, LLMError
from memory.llm.stats import LLMCallStats, Usage
from memory.models import BoundaryReason, Message, Segment

log = logging.getLogger("epimem.llm")


@dataclass
class SegmenterStats(LLMCallStats):
    """The LLM segmenter's counters; ``fallbacks`` are windows cut by the heuristic instead."""

    prompt_version: str = PROMPT_VERSION


@dataclass(frozen=True)
class Piece:
    """A run of ``size`` consecutive messages of a window, and why it ends."""

    size: int
    reason: BoundaryReason
    topic: str | None = None


def _as_index(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a boolean is not an index")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ValueError(f"not an index: {value!r}")


def parse_segmentation(data: dict[str, Any], count: int) -> list[Piece]:
    """Pieces from the LLM's answer for ``count`` messages; LLMError(kind='schema') if invalid.

    Repairs what is unambiguous: 0-based indices, segments or indices listed out of order.
    Rejects anything that does not cover 1..count exactly once as consecutive runs.
    """
    episodes = data.get("episodes", data.get("segments"))
    if not isinstance(episodes, list) or not episodes:
        raise LLMError("segmentation has no 'episodes' list", kind="schema")
    groups: list[tuple[list[int], str | None]] = []
    for item in episodes:
        raw = item.get("indices") if isinstance(item, dict) else item
        if not isinstance(raw, list) or not raw:
            raise LLMError("a segment has no 'indices' list", kind="schema")
        try:
            indices = sorted(_as_index(value) for value in raw)
        except ValueError as error:
            raise LLMError(f"bad segment index: {error}", kind="schema") from error
        topic = item.get("topic") if isinstance(item, dict) else None
        clean_topic = " ".join(topic.split())[:200] if isinstance(topic, str) else ""
        groups.append((indices, clean_topic or None))
    if min(index for indices, _ in groups for index in indices) == 0:
        groups = [([index + 1 for index in indices], topic) for indices, topic in groups]
    groups.sort(key=lambda group: group[0][0])
    flat = [index for indices, _ in groups for index in indices]
    if flat != list(range(1, count + 1)):
        raise LLMError(f"segments do not cover messages 1..{count} exactly once, in consecutive runs", kind="schema")
    return [Piece(size=len(indices), reason=BoundaryReason.LLM, topic=topic) for indices, topic in groups]


def _cap_size(pieces: list[Piece], max_messages: int) -> list[Piece]:
    capped: list[Piece] = []
    for piece in pieces:
        size = piece.size
        while size > max_messages:
            capped.append(Piece(size=max_messages, reason=BoundaryReason.MAX_SIZE, topic=piece.topic))
            size -= max_messages
        capped.append(replace(piece, size=size))
    return capped


class LLMSegmenter:
    """Implements Segmenter with an LLM, falling back to the heuristic segmenter per window."""

    def __init__(self, client: LLMClient, *, policy: SegmentationPolicy, window: int = 40) -> None:
        if window < 2:
            raise ValueError("the segmenter window must hold at least 2 messages")
        self._client = client
        self.policy = policy
        self.window = window
        self._lock = threading.Lock()
        self._stats = SegmenterStats(model=client.model)

    def stats(self) -> SegmenterStats:
        with self._lock:
            return self._stats.snapshot()

    def segment(
        self, messages: Sequence[Message], *, vectors: Vectors = None, final_reason: BoundaryReason = FLUSH
    ) -> list[Segment]:
        if not messages:
            return []
        if vectors is not None and len(vectors) != len(messages):
            raise ValueError("one vector per message is required")
        order = sorted(range(len(messages)), key=lambda index: messages[index].timestamp)
        ordered = [messages[index] for index in order]
        ordered_vectors = vectors[order] if vectors is not None else None
        segments: list[Segment] = []
        start = 0
        for end in [*self._time_gap_cuts(ordered), len(ordered)]:
            reason = final_reason if end == len(ordered) else BoundaryReason.TIME_GAP
            run_vectors = ordered_vectors[start:end] if ordered_vectors is not None else None
            segments += self._segment_run(ordered[start:end], run_vectors, end_reason=reason)
            start = end
        return segments

    def _time_gap_cuts(self, ordered: list[Message]) -> list[int]:
        return [
            index
            for index in range(1, len(ordered))
            if ordered[index].timestamp - ordered[index - 1].timestamp > self.policy.time_gap
        ]

    def _segment_run(
        self, run: list[Message], vectors: np.ndarray | None, *, end_reason: BoundaryReason
    ) -> list[Segment]:
        segments: list[Segment] = []
        start = 0
        while start < len(run):
            window = run[start : start + self.window]
            more_after = start + len(window) < len(run)
            window_vectors = vectors[start : start + len(window)] if vectors is not None else None
            pieces = self._ask(window) if len(window) > 1 else [Piece(size=1, reason=end_reason)]
            if pieces is None:
                pieces = self._heuristic(window, window_vectors)
            pieces = _cap_size(pieces, self.policy.max_messages)
            if more_after:
                if len(pieces) > 1:
                    pieces = pieces[:-1]  # the open last piece starts the next window
                else:
                    pieces = [replace(pieces[0], reason=BoundaryReason.MAX_SIZE)]
            for piece in pieces:
                segments.append(
                    Segment(
                        messages=tuple(run[start : start + piece.size]),
                        boundary_reason=piece.reason,
                        topic=piece.topic,
                    )
                )
                start += piece.size
        segments[-1] = segments[-1].model_copy(update={"boundary_reason": end_reason})
        return segments

    def _heuristic(self, window: list[Message], vectors: np.ndarray | None) -> list[Piece]:
        segments = split_messages(window, policy=self.policy, vectors=vectors, final_reason=BoundaryReason.FLUSH)
        return [Piece(size=len(segment.messages), reason=segment.boundary_reason) for segment in segments]

    def _ask(self, window: list[Message]) -> list[Piece] | None:
        """The LLM's pieces for one window, or None (counted as a fallback) if it failed."""
        prompt = segmenter_messages(
            window, min_messages=self.policy.min_messages, max_messages=self.policy.max_messages
        )
        try:
            reply = self._client.complete_json(prompt)
        except LLMError as error:
            self._record(error.attempts, error.latency_seconds, error.usage, error=error.kind)
            log.warning("LLM segmentation failed (%s); heuristic segmentation for this window", error.kind)
            return None
        try:
            pieces = parse_segmentation(reply.data, len(window))
        except LLMError as error:
            self._record(reply.attempts, reply.latency_seconds, reply.usage, error=error.kind)
            log.warning("LLM segmentation rejected (%s); heuristic segmentation for this window", error.message)
            return None
        self._record(reply.attempts, reply.latency_seconds, reply.usage)
        return pieces

    def _record(self, attempts: int, latency: float, usage: Usage, *, error: str | None = None) -> None:
        with self._lock:
            self._stats.record_call(attempts, latency, usage, error=error)
            if error is not None:
                self._stats.fallbacks += 1
