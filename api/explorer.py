"""Read-only routes the browser explorer (``/ui``) needs, on the public ``/v1`` API like every
other client: who the caller is, the groups its key can read, per-session counts, and a time
histogram of a group's episodes so a timeline can draw a real time axis without loading the
whole group. The explorer's static files are served from ``api/ui`` at ``/ui``.

Group isolation holds as everywhere: a key only ever sees (and counts) the groups it covers.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query
from pydantic import BaseModel, Field
from starlette.staticfiles import StaticFiles

from api.auth import Principal
from api.errors import error_responses
from api.facade import Epimem
from api.routes import READ, ServiceDep
from api.schemas import GroupId, SessionIdQuery
from memory.errors import InvalidInputError, NotFoundError
from memory.models import GroupConfiguration, SessionInfo, UtcDatetime
from memory.timeutil import from_epoch, to_epoch
from retrieval.search import EPISODE_KINDS, resolve_window
from retrieval.types import Scope

UI_DIR = Path(__file__).parent / "ui"
MAX_BUCKETS = 400

explorer = APIRouter(prefix="/v1", responses=error_responses(401, 403, 422, 503))


class WhoAmI(BaseModel):
    mode: str = Field(description="`local` (no keys configured) or `key`")
    role: str = Field(description="read, write or admin (local mode: admin)")
    groups: list[str] = Field(description="the key's group patterns (`*` = every group)")


class SessionStats(BaseModel):
    session: SessionInfo
    messages: int
    episodes: int
    first: datetime | None = Field(description="earliest message or episode time")
    last: datetime | None = Field(description="latest message or episode time")


class GroupStats(BaseModel):
    group_id: str
    description: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    sessions: int
    messages: int
    episodes: int
    first: datetime | None = None
    last: datetime | None = None


class GroupsOut(BaseModel):
    groups: list[GroupStats]
    next_offset: int | None = Field(description="offset of the next page; null on the last page")


class GroupOverviewOut(BaseModel):
    group: GroupStats
    sessions: list[SessionStats] = Field(description="oldest first, paged")
    next_offset: int | None


class HistogramOut(BaseModel):
    start: datetime | None = Field(description="start of the first bucket (null: no episodes in the window)")
    end: datetime | None
    bucket_seconds: float
    total: int
    sessions: list[str]
    counts: list[list[int]] = Field(description="per session (same order as `sessions`), episodes per bucket")


def _principal_role(principal: Principal) -> tuple[str, str, list[str]]:
    if principal.key is None:
        return "local", "admin", ["*"]
    return "key", principal.key.role.name.lower(), list(principal.key.groups)


def _visible(principal: Principal, group_id: str) -> bool:
    return principal.key is None or principal.key.covers(group_id)


def _span(times: list[float]) -> tuple[datetime | None, datetime | None]:
    return (from_epoch(min(times)), from_epoch(max(times))) if times else (None, None)


def _tally(service: Epimem, group_id: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Message and episode times per session, from metadata only."""
    messages: dict[str, list[float]] = {}
    for _, _, meta in service.store.log_records(group_id, "message"):
        messages.setdefault(str(meta["session_id"]), []).append(float(meta["ts"]))
    episodes: dict[str, list[float]] = {}
    for record in service.store.get_vectors(group_id, where={"kind": {"$in": list(EPISODE_KINDS)}}):
        episodes.setdefault(str(record.metadata["session_id"]), []).append(float(record.metadata["ts"]))
    return messages, episodes


def _group_stats(service: Epimem, group_id: str) -> tuple[GroupStats, list[SessionStats]]:
    config = service.store.get_group_config(group_id) or GroupConfiguration(group_id=group_id)
    infos = service.store.list_sessions(group_id)
    messages, episodes = _tally(service, group_id)
    sessions = []
    for info in infos:
        times = messages.get(info.session_id, []) + episodes.get(info.session_id, [])
        first, last = _span(times)
        sessions.append(
            SessionStats(
                session=info,
                messages=len(messages.get(info.session_id, [])),
                episodes=len(episodes.get(info.session_id, [])),
                first=first,
                last=last,
            )
        )
    every = [t for values in (*messages.values(), *episodes.values()) for t in values]
    first, last = _span(every)
    stats = GroupStats(
        group_id=group_id,
        description=config.description,
        metadata=config.metadata,
        sessions=len(infos),
        messages=sum(len(v) for v in messages.values()),
        episodes=sum(len(v) for v in episodes.values()),
        first=first,
        last=last,
    )
    return stats, sessions


@explorer.get("/auth/whoami", tags=["groups"], summary="The caller's role and group patterns")
def whoami(principal: Annotated[Principal, READ]) -> WhoAmI:
    """What the presented key may do (never the key itself). In local mode: admin of every group."""
    mode, role, groups = _principal_role(principal)
    return WhoAmI(mode=mode, role=role, groups=groups)


@explorer.get("/groups", tags=["groups"], summary="The groups this key can read, with counts")
def list_groups(
    principal: Annotated[Principal, READ],
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> GroupsOut:
    """Only groups covered by the caller's key, sorted by id and paged; each with its counts."""
    visible = [group for group in service.store.list_groups() if _visible(principal, group)]
    page = visible[offset : offset + limit]
    more = len(visible) > offset + limit
    return GroupsOut(groups=[_group_stats(service, g)[0] for g in page], next_offset=offset + limit if more else None)


@explorer.get(
    "/groups/{group_id}/overview",
    tags=["groups"],
    dependencies=[READ],
    responses=error_responses(404),
    summary="A group's counts and its sessions with counts of messages and episodes",
)
def group_overview(
    group_id: GroupId,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> GroupOverviewOut:
    if not service.store.group_exists(group_id) and not service.store.list_sessions(group_id):
        raise NotFoundError("group not found")
    group, sessions = _group_stats(service, group_id)
    more = len(sessions) > offset + limit
    return GroupOverviewOut(
        group=group, sessions=sessions[offset : offset + limit], next_offset=offset + limit if more else None
    )


def _bucket_counts(
    records: list[tuple[str, float]], start: float, width: float, buckets: int
) -> tuple[list[str], list[list[int]]]:
    sessions = sorted({session for session, _ in records})
    row = {session: index for index, session in enumerate(sessions)}
    counts = [[0] * buckets for _ in sessions]
    for session, ts in records:
        counts[row[session]][min(buckets - 1, max(0, int((ts - start) // width)))] += 1
    return sessions, counts


@explorer.get(
    "/groups/{group_id}/timeline/histogram",
    tags=["recall"],
    dependencies=[READ],
    summary="How many episodes fall in each slice of a time window, per session",
)
def timeline_histogram(
    group_id: GroupId,
    service: ServiceDep,
    session_id: SessionIdQuery = None,
    start: Annotated[UtcDatetime | None, Query(description="inclusive; default: the first episode")] = None,
    end: Annotated[UtcDatetime | None, Query(description="exclusive; default: just after the last episode")] = None,
    time: Annotated[str | None, Query(max_length=200, description="e.g. 'last week', 'May 2023'")] = None,
    reference_time: Annotated[UtcDatetime | None, Query(description="what 'now' means for `time`")] = None,
    timezone: Annotated[str, Query(max_length=64)] = "UTC",
    buckets: Annotated[int, Query(ge=1, le=MAX_BUCKETS)] = 60,
) -> HistogramOut:
    """Counts only (from metadata); the episodes themselves come page by page from `/timeline`.
    `time` is read by the same parser as search and context; the window actually used is returned."""
    try:
        scope = Scope(start=start, end=end, time=time, reference_time=reference_time, timezone=timezone)
    except ValueError as error:
        raise InvalidInputError(str(error).splitlines()[-1]) from None
    window = resolve_window(scope)
    clauses: list[dict[str, Any]] = [{"kind": {"$in": list(EPISODE_KINDS)}}]
    if window.start is not None:
        clauses.append({"ts": {"$gte": to_epoch(window.start)}})
    if window.end is not None:
        clauses.append({"ts": {"$lt": to_epoch(window.end)}})
    where = clauses[0] if len(clauses) == 1 else {"$and": clauses}
    found = service.store.get_vectors(group_id, session_id=session_id, where=where)
    records = [(str(r.metadata["session_id"]), float(r.metadata["ts"])) for r in found]
    times = [ts for _, ts in records]
    if not times and (window.start is None or window.end is None):
        return HistogramOut(start=None, end=None, bucket_seconds=0, total=0, sessions=[], counts=[])
    # A window taken from the data gets a margin, so the first and last episodes are not on the edge.
    margin = max(1800.0, (max(times) - min(times)) * 0.03) if times else 0.0
    lo = to_epoch(window.start) if window.start is not None else min(times) - margin
    hi = to_epoch(window.end) if window.end is not None else max(times) + margin
    if hi <= lo:
        return HistogramOut(start=None, end=None, bucket_seconds=0, total=0, sessions=[], counts=[])
    width = math.ceil((hi - lo) / buckets * 1000) / 1000 or 0.001
    sessions, counts = _bucket_counts(records, lo, width, buckets)
    return HistogramOut(
        start=from_epoch(lo),
        end=from_epoch(lo + width * buckets),
        bucket_seconds=width,
        total=len(records),
        sessions=sessions,
        counts=counts,
    )


def mount_ui(app: FastAPI) -> None:
    """Serve the explorer's static files at ``/ui`` (``/ui/`` → index.html)."""
    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")
