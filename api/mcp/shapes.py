"""What the MCP tools take and return: their argument types (each described for the agent), the hit
shape, and how a refusal names what is wrong without quoting the caller's values."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from memory.models import MAX_ID_LENGTH, Role
from retrieval.filters import RecallFilter


class ChatMessage(BaseModel):
    """One message of a conversation."""

    id: str = Field(description="stable id of the message; re-sending the same id is a no-op")
    content: str = Field(description="what was said")
    role: Role = Field(default=Role.USER, description="user, assistant, system or tool")
    speaker: str | None = Field(default=None, max_length=MAX_ID_LENGTH, description="who said it (a name)")
    timestamp: datetime | None = Field(default=None, description="when it was said (ISO 8601); default: now")


class Hit(BaseModel):
    episode_id: str
    session_id: str
    title: str
    content: str
    timestamp: datetime
    score: float
    message_ids: list[str] = Field(description="ids of the source messages")
    pending: bool = Field(
        default=False,
        description="messages stored and recallable but not in an episode yet (the session's open stretch)",
    )


GroupArg = Annotated[str | None, Field(description="group (memory space); omit to use the server's default group")]
SessionArg = Annotated[str, Field(description="session (conversation thread) id inside the group")]
SessionsArg = Annotated[list[str] | None, Field(description="only these sessions; default: the whole group")]
TimeArg = Annotated[str | None, Field(description="time window in words, e.g. 'last week', 'in March 2023'")]
RefTimeArg = Annotated[datetime | None, Field(description="what 'now' means for `time` (ISO 8601); default: now")]
FilterArg = Annotated[
    RecallFilter | None,
    Field(description="only these speakers (ids or names), roles, episode types or metadata values (all must hold)"),
]


def hit_of(hit: Any) -> Hit:
    episode = hit.episode
    return Hit(
        episode_id=episode.uuid,
        session_id=episode.session_id,
        title=episode.title,
        content=episode.content,
        timestamp=episode.timestamp,
        score=round(float(hit.score), 6),
        message_ids=list(episode.source_message_ids),
        pending=bool(hit.pending),
    )


def scope_of(
    sessions: list[str] | None, time: str | None, reference_time: datetime | None, wanted: RecallFilter | None = None
) -> dict[str, Any]:
    options = {"session_ids": sessions, "time": time, "reference_time": reference_time, "filter": wanted}
    return {key: value for key, value in options.items() if value is not None}


def problems(error: ValidationError) -> str:
    """What is wrong, by place (``messages.0.timestamp: Input should be a valid datetime``), never
    the values: they are the caller's data, and may be huge."""
    found = [f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors(include_input=False)]
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; ".join(found[:3]) + more
