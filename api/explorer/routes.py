"""Read-only routes the browser explorer (``/ui``) needs, on the public ``/v1`` API like every
other client: who the caller is, the groups its key can read, per-session counts, and a time
histogram of a group's episodes so a timeline can draw a real time axis without loading the
whole group. The explorer's static files are served from ``api/explorer/ui`` at ``/ui``.

Group isolation holds as everywhere: a key only ever sees (and counts) the groups it covers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query
from pydantic import BaseModel, Field, ValidationError
from starlette.staticfiles import StaticFiles

from api.auth import Principal
from api.facade import Epimem
from api.http.error_handling import error_responses
from api.http.params import CursorQuery, GroupId, SessionIdQuery
from api.http.routes import READ, ServiceDep
from memory.errors import InvalidInputError, ModelMismatchError
from memory.models import UtcDatetime
from memory.pages import Key, microseconds, page_after
from retrieval.overview import GroupStats, Histogram, SessionStats
from retrieval.types import Scope

UI_DIR = Path(__file__).parent / "ui"
MAX_BUCKETS = 400

explorer = APIRouter(prefix="/v1", responses=error_responses(401, 403, 422, 429, 503))


class WhoAmI(BaseModel):
    mode: str = Field(description="`local` (no keys configured) or `key`")
    role: str = Field(description="read, write or admin (local mode: admin)")
    groups: list[str] = Field(description="the key's group patterns (`*` = every group)")


NEXT_CURSOR = "pass it as `cursor` for the next page; null on the last page"


class GroupsOut(BaseModel):
    groups: list[GroupStats]
    next_cursor: str | None = Field(description=NEXT_CURSOR)


class GroupOverviewOut(BaseModel):
    group: GroupStats
    sessions: list[SessionStats] = Field(description="oldest first, paged")
    next_cursor: str | None = Field(description=NEXT_CURSOR)


def _principal_role(principal: Principal) -> tuple[str, str, list[str]]:
    if principal.key is None:
        return "local", "admin", ["*"]
    return "key", principal.key.role.name.lower(), list(principal.key.groups)


def _visible(principal: Principal, group_id: str) -> bool:
    return principal.key is None or principal.key.covers(group_id)


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
    cursor: CursorQuery = None,
) -> GroupsOut:
    """Only groups covered by the caller's key, sorted by id and paged; each with its counts."""
    visible = [group for group in service.list_groups() if _visible(principal, group)]
    page, next_cursor = page_after(visible, lambda g: (g,), shape=(str,), limit=limit, cursor=cursor, what="groups")
    return GroupsOut(groups=[_listed_stats(service, g) for g in page], next_cursor=next_cursor)


def _listed_stats(service: Epimem, group_id: str) -> GroupStats:
    """A group's counts for a list of groups: one group that cannot be read now (built with another embedding
    model) is listed as such instead of failing the whole list."""
    try:
        return service.group_stats(group_id)
    except ModelMismatchError as refused:
        return GroupStats(group_id=group_id, sessions=0, messages=0, episodes=0, unreadable=refused.message)


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
    cursor: CursorQuery = None,
) -> GroupOverviewOut:
    group, sessions = service.group_overview(group_id)
    page, next_cursor = page_after(
        sessions, _session_key, shape=SESSION_KEY, limit=limit, cursor=cursor, what="sessions"
    )
    return GroupOverviewOut(group=group, sessions=page, next_cursor=next_cursor)


SESSION_KEY = (int, str)  # a session's creation time in microseconds, its id: the order of the log's sessions


def _session_key(stats: SessionStats) -> Key:
    return microseconds(stats.session.created_at), stats.session.session_id


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
) -> Histogram:
    """Counts only (from metadata); the episodes themselves come page by page from `/timeline`.
    `time` is read by the same parser as search and context; the window actually used is returned."""
    try:
        scope = Scope(
            session_ids=[session_id] if session_id is not None else None,
            start=start,
            end=end,
            time=time,
            reference_time=reference_time,
            timezone=timezone,
        )
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise InvalidInputError(f"{where}: {problem['msg']}" if where else str(problem["msg"])) from None
    return service.timeline_histogram(group_id, scope, buckets=buckets)


def mount_ui(app: FastAPI) -> None:
    """Serve the explorer's static files at ``/ui`` (``/ui/`` → index.html)."""
    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")
