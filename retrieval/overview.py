"""Counts of a group for browsing it (the explorer at ``/ui``): per-session counts of messages and
episodes with their time spans, and a time histogram of a group's episodes so a timeline can draw a
real time axis without loading the whole group. From metadata only."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from memory.models import Episode, GroupConfiguration, MessageState, SessionInfo
from memory.store.protocols import LogReader, VectorReader
from memory.store.records import EPISODE_KINDS, open_episode_id
from memory.timeutil import from_epoch, to_epoch
from retrieval.scope import resolve_window, scope_filter
from retrieval.timeline import in_selection
from retrieval.types import Scope


class SessionStats(BaseModel):
    session: SessionInfo
    messages: int
    episodes: int
    pending: int = Field(default=0, description="messages stored and recallable, not in an episode yet")
    open_episode_id: str | None = Field(
        default=None, description="id of the session's open episode (its pending messages), when it has one"
    )
    first: datetime | None = Field(description="earliest message or episode time")
    last: datetime | None = Field(description="latest message or episode time")
    speakers: list[str] = Field(default_factory=list, description="producer ids of its messages, first seen first")


class GroupStats(BaseModel):
    group_id: str
    description: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    sessions: int
    messages: int
    episodes: int
    pending: int = Field(default=0, description="messages stored and recallable, not in an episode yet")
    first: datetime | None = None
    last: datetime | None = None
    unreadable: str | None = Field(
        default=None,
        description="in a list of groups: why this group's counts could not be read (e.g. its vectors were built "
        "with another embedding model: `epimem reembed`); its counts are 0 then",
    )


class Histogram(BaseModel):
    start: datetime | None = Field(description="start of the first bucket (null: no episodes in the window)")
    end: datetime | None
    bucket_seconds: float
    total: int
    sessions: list[str]
    counts: list[list[int]] = Field(description="per session (same order as `sessions`), episodes per bucket")


Speakers = dict[str, dict[str, None]]  # session -> producer ids, first seen first
EMPTY = Histogram(start=None, end=None, bucket_seconds=0, total=0, sessions=[], counts=[])


def _span(times: list[float]) -> tuple[datetime | None, datetime | None]:
    return (from_epoch(min(times)), from_epoch(max(times))) if times else (None, None)


class Overview:
    def __init__(self, *, log: LogReader, vectors: VectorReader) -> None:
        self._log = log
        self._vectors = vectors

    def _times(self, group_id: str) -> tuple[dict[str, list[float]], dict[str, list[float]], Counter[str], Speakers]:
        """Message and episode times per session, the pending messages per session, and who spoke in each (an
        ordered set of producer ids)."""
        messages: dict[str, list[float]] = {}
        pending: Counter[str] = Counter()
        speakers: Speakers = {}
        for _, _, meta in self._log.records(group_id, "message"):
            session = str(meta["session_id"])
            messages.setdefault(session, []).append(float(meta["ts"]))
            if meta.get("state") == MessageState.PENDING.value:
                pending[session] += 1
            if meta.get("producer_id"):
                speakers.setdefault(session, {})[str(meta["producer_id"])] = None
        episodes: dict[str, list[float]] = {}
        for record in self._vectors.records(group_id, selection=scope_filter(Scope(), kinds=EPISODE_KINDS)):
            episodes.setdefault(record.session_id, []).append(record.timestamp)
        return messages, episodes, pending, speakers

    def group(self, group_id: str) -> tuple[GroupStats, list[SessionStats]]:
        """The group's counts, and its sessions' (oldest first)."""
        config = self._log.get_group_config(group_id) or GroupConfiguration(group_id=group_id)
        infos = self._log.list_sessions(group_id)
        messages, episodes, pending, speakers = self._times(group_id)
        sessions = []
        for info in infos:
            first, last = _span(messages.get(info.session_id, []) + episodes.get(info.session_id, []))
            sessions.append(
                SessionStats(
                    session=info,
                    messages=len(messages.get(info.session_id, [])),
                    episodes=len(episodes.get(info.session_id, [])),
                    pending=pending[info.session_id],
                    open_episode_id=open_episode_id(info.session_id) if pending[info.session_id] else None,
                    first=first,
                    last=last,
                    speakers=list(speakers.get(info.session_id, {})),
                )
            )
        first, last = _span([t for values in (*messages.values(), *episodes.values()) for t in values])
        stats = GroupStats(
            group_id=group_id,
            description=config.description,
            metadata=config.metadata,
            sessions=len(infos),
            messages=sum(len(v) for v in messages.values()),
            episodes=sum(len(v) for v in episodes.values()),
            pending=sum(pending.values()),
            first=first,
            last=last,
        )
        return stats, sessions

    def histogram(
        self, group_id: str, scope: Scope, *, buckets: int, open_episodes: Iterable[Episode] = ()
    ) -> Histogram:
        """Episodes per bucket and session over the scope's window (default: the episodes' own span,
        with a margin so the first and last are not on the edge). ``open_episodes``: the group's open episodes,
        counted where the scope holds them (as the timeline shows them)."""
        window = resolve_window(scope)
        selection = scope_filter(scope, window, kinds=EPISODE_KINDS)
        found = self._vectors.records(group_id, selection=selection)
        records = [(record.session_id, record.timestamp) for record in found]
        records += [(e.session_id, to_epoch(e.timestamp)) for e in open_episodes if in_selection(e, selection)]
        times = [ts for _, ts in records]
        if not times and (window.start is None or window.end is None):
            return EMPTY
        margin = max(1800.0, (max(times) - min(times)) * 0.03) if times else 0.0
        lo = to_epoch(window.start) if window.start is not None else min(times) - margin
        hi = to_epoch(window.end) if window.end is not None else max(times) + margin
        if hi <= lo:
            return EMPTY
        width = math.ceil((hi - lo) / buckets * 1000) / 1000 or 0.001
        sessions = sorted({session for session, _ in records})
        row = {session: index for index, session in enumerate(sessions)}
        counts = [[0] * buckets for _ in sessions]
        for session, ts in records:
            counts[row[session]][min(buckets - 1, max(0, int((ts - lo) // width)))] += 1
        return Histogram(
            start=from_epoch(lo),
            end=from_epoch(lo + width * buckets),
            bucket_seconds=width,
            total=len(records),
            sessions=sessions,
            counts=counts,
        )
