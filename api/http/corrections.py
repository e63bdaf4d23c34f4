"""The HTTP routes of correcting memory (memory.lifecycle.editing, memory.lifecycle.audit): correct an
episode (write), read its revisions (read), redact a message and read the audit trail (admin). Changes
are signed with the caller's key name (``api.auth.ApiKey.actor``; ``local`` in local mode)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Principal
from api.http.error_handling import error_responses
from api.http.params import EpisodeIdPath, GroupId, MessageIdPath, SessionId
from api.http.routes import ADMIN, GROUP, READ, SESSION, WRITE, ServiceDep
from memory.lifecycle.audit import MAX_PAGE, AuditPage
from memory.lifecycle.editing import DEFAULT_REPLACEMENT
from memory.lifecycle.revisions import Revision
from memory.models import Episode
from memory.receipts import RedactionReceipt

corrections = APIRouter(prefix="/v1", responses=error_responses(401, 403, 404, 413, 415, 422, 429, 503))


class EpisodeCorrectionIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"title": "Ben brings the canoe", "reason": "it was a canoe, not a kayak"}]},
    )

    title: str | None = Field(default=None, min_length=1, max_length=500)
    content: str | None = Field(default=None, min_length=1, max_length=100_000)
    user_metadata: dict[str, Any] | None = None
    reason: str | None = Field(default=None, max_length=1000, description="why (kept in the revision)")


class CorrectedOut(BaseModel):
    episode: Episode


class RevisionsOut(BaseModel):
    revisions: list[Revision] = Field(description="oldest first; revision 0 is the generated episode")


class RedactionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replacement: str = Field(default=DEFAULT_REPLACEMENT, min_length=1, max_length=1000)


@corrections.patch(
    SESSION + "/episodes/{episode_id}",
    tags=["episodes"],
    summary="Correct an episode's title, content or user_metadata (kept as a revision)",
)
def correct_episode(
    group_id: GroupId,
    session_id: SessionId,
    episode_id: EpisodeIdPath,
    body: EpisodeCorrectionIn,
    service: ServiceDep,
    who: Annotated[Principal, WRITE],
) -> CorrectedOut:
    """The episode is re-embedded and re-indexed before the answer: search, context and the timeline
    show the correction at once. Its source messages are not changed. A correction that changes
    nothing adds no revision. Summaries cannot be corrected (correct the episodes they compact)."""
    episode = service.correct_episode(
        group_id, session_id, episode_id, **body.model_dump(exclude_none=True), actor=who.actor
    )
    return CorrectedOut(episode=episode)


@corrections.get(
    SESSION + "/episodes/{episode_id}/revisions",
    tags=["episodes"],
    dependencies=[READ],
    summary="An episode's revisions, oldest first",
)
def revisions(group_id: GroupId, session_id: SessionId, episode_id: EpisodeIdPath, service: ServiceDep) -> RevisionsOut:
    return RevisionsOut(revisions=service.episode_revisions(group_id, session_id, episode_id))


@corrections.post(
    SESSION + "/messages/{message_id}/redact",
    tags=["messages"],
    summary="Redact a message: its text replaced, its record kept, what was built from it rebuilt",
)
def redact_message(
    group_id: GroupId,
    session_id: SessionId,
    message_id: MessageIdPath,
    service: ServiceDep,
    who: Annotated[Principal, ADMIN],
    body: Annotated[RedactionIn | None, Body()] = None,
) -> RedactionReceipt:
    """The message keeps its id, speaker and time; its content becomes `replacement` (default
    `[redacted]`) and its metadata gains `epimem_redacted: true`. The episodes built from it are made
    again, the summaries citing them rebuilt, and on embedded Chroma the old text is erased from the
    data folder before the answer (docs/trust.md). Redacting a redacted message changes nothing
    (`redacted: false`)."""
    replacement = body.replacement if body is not None else DEFAULT_REPLACEMENT
    return service.redact_message(group_id, session_id, message_id, replacement=replacement, actor=who.actor)


@corrections.get(GROUP + "/audit", tags=["groups"], dependencies=[ADMIN], summary="The group's audit trail")
def audit(
    group_id: GroupId,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="`next_cursor` of the previous page")] = None,
) -> AuditPage:
    """Every change to the group's memory, newest first: time, actor (the key's name, never its
    secret), action, session and target ids; never the content of what changed."""
    return service.audit(group_id, limit=limit, cursor=cursor)
