"""Request and response bodies of the HTTP API. Domain models are reused as they are; these only
wrap them (lists, receipts) so every response is a JSON object that can grow."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from memory.models import (
    MAX_ID_LENGTH,
    Episode,
    Message,
    ScopeId,
    SessionInfo,
    UtcDatetime,
    ValidUnicode,
)
from retrieval.types import SearchHit

_MESSAGE_EXAMPLE: dict[str, Any] = {
    "id": "m1",
    "role": "user",
    "content": "I adopted a dog called Rex yesterday.",
    "timestamp": "2023-05-08T13:56:00Z",
    "producer_id": "Caroline",
    "produced_for_id": "Melanie",
}


class MessagesIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"messages": [_MESSAGE_EXAMPLE]}]})

    messages: list[Message] = Field(
        min_length=1, description="a batch; idempotent by message id (same id + same content = duplicate)"
    )


class EpisodesOut(BaseModel):
    episodes: list[Episode]


class EpisodeOut(BaseModel):
    episode: Episode
    messages: list[Message] | None = Field(default=None, description="source messages, with `?expand=messages`")
    pending: bool = Field(
        default=False,
        description="a session's open episode (its id from a pending search hit or citation): messages not in an "
        "episode yet, shown as one; it is replaced by real episodes once the session's segment closes",
    )


class SessionInfoIn(ValidUnicode):
    """SessionInfo without its ids (they come from the path)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"title": "Weekly sync", "user_ids": ["ana"], "metadata": {"team": "a"}}]},
    )

    title: str | None = Field(default=None, max_length=1000)
    agent_ids: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(default_factory=list, max_length=1000)
    user_ids: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(default_factory=list, max_length=1000)
    metadata: dict[str, Any] = Field(default_factory=dict)


class GroupConfigurationIn(ValidUnicode):
    """GroupConfiguration without its id (it comes from the path)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"description": "Team A's assistant", "agent_ids": ["assistant"]}]},
    )

    description: str | None = Field(default=None, max_length=10_000)
    agent_ids: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(default_factory=list, max_length=1000)
    user_ids: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(default_factory=list, max_length=1000)
    metadata: dict[str, Any] = Field(default_factory=dict)


class SessionsOut(BaseModel):
    sessions: list[SessionInfo] = Field(description="oldest first")


class SearchOut(BaseModel):
    hits: list[SearchHit] = Field(description="best first (or in time order with `order: chronological`)")


class MessageOut(BaseModel):
    message: Message


class HistoryOut(BaseModel):
    messages: list[Message]
    next_cursor: str | None = Field(description="pass it as `cursor` for the next page; null on the last page")


class SummariesIn(ValidUnicode):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"days_back": 7}]})

    days_back: float = Field(default=7, gt=0, le=36_600, description="summarise the episodes of this many days")
    max_memories_per_summary: int = Field(default=50, ge=2, le=1000)
    session_id: ScopeId | None = Field(default=None, description="only this session; default: every session")
    reference_time: UtcDatetime | None = Field(default=None, description="what 'now' means; default: now")


class Readiness(BaseModel):
    status: str
    store: str
    model: str
    recovering: bool


class Health(BaseModel):
    status: str
