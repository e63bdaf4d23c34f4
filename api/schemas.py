"""Request and response bodies of the HTTP API. Domain models are reused as they are; these only
wrap them (lists, receipts) so every response is a JSON object that can grow."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memory.models import (
    MAX_ID_LENGTH,
    MAX_MESSAGE_ID_LENGTH,
    Episode,
    Message,
    ScopeId,
    SessionInfo,
    UtcDatetime,
    ValidUnicode,
    check_message_id,
    check_scope_id,
)
from retrieval.types import SearchHit

# Path ids: any text without control characters and without '/', which cannot be addressed in a
# URL path (ids containing '/' are usable from Python, not over HTTP). Not blank.
_PATH_ID_PATTERN = r"^[^\x00-\x1f\x7f/]*[^\s\x00-\x1f\x7f/][^\x00-\x1f\x7f/]*$"

GroupId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        pattern=_PATH_ID_PATTERN,
        description="group id (1-500 characters, no control characters, no '/')",
        examples=["team-a"],
    ),
    AfterValidator(check_scope_id),
]
SessionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        pattern=_PATH_ID_PATTERN,
        description="session id (1-500 characters, no control characters, no '/')",
        examples=["chat-1"],
    ),
    AfterValidator(check_scope_id),
]
MessageIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_MESSAGE_ID_LENGTH,
        pattern=_PATH_ID_PATTERN,
        description="message id (1-256 characters, no control characters, no '/')",
        examples=["m1"],
    ),
    AfterValidator(check_message_id),
]
SessionIdQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=MAX_ID_LENGTH, description="only this session"),
    AfterValidator(lambda value: None if value is None else check_scope_id(value)),
]
EpisodeIdPath = Annotated[
    str,
    Path(min_length=1, max_length=MAX_ID_LENGTH, pattern=_PATH_ID_PATTERN, description="episode uuid"),
]

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


class AddReceiptOut(BaseModel):
    accepted: list[str] = Field(description="ids stored now")
    duplicates: list[str] = Field(description="ids already stored with the same content (no-op)")
    pending: int = Field(description="messages of the session not yet in an episode")


class EpisodesOut(BaseModel):
    episodes: list[Episode]


class EpisodeOut(BaseModel):
    episode: Episode
    messages: list[Message] | None = Field(default=None, description="source messages, with `?expand=messages`")


class DeletionOut(BaseModel):
    collections: list[str] = Field(description="Chroma collections dropped")
    vectors: int = Field(description="vectors removed")
    log_records: int = Field(description="message/session/group records removed")
    ids: list[str] = Field(description="every removed record id")
    messages: list[str] = Field(default_factory=list, description="message ids removed")
    episodes: list[str] = Field(default_factory=list, description="episode ids removed")
    summaries: list[str] = Field(default_factory=list, description="summary ids removed")
    repaired: list[str] = Field(default_factory=list, description="episodes and summaries rebuilt from what remained")
    caches: list[str] = Field(default_factory=list, description="in-memory caches cleared")


_UnicodeIn = ValidUnicode  # request bodies whose text must be valid Unicode


class SessionInfoIn(_UnicodeIn):
    """SessionInfo without its ids (they come from the path)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"title": "Weekly sync", "user_ids": ["ana"], "metadata": {"team": "a"}}]},
    )

    title: str | None = Field(default=None, max_length=1000)
    agent_ids: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(default_factory=list, max_length=1000)
    user_ids: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(default_factory=list, max_length=1000)
    metadata: dict[str, Any] = Field(default_factory=dict)


class GroupConfigurationIn(_UnicodeIn):
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


class HistoryOut(BaseModel):
    messages: list[Message]
    next_offset: int | None = Field(description="offset of the next page; null on the last page")


class SummariesIn(_UnicodeIn):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"days_back": 7}]})

    days_back: float = Field(default=7, gt=0, le=36_600, description="summarise the episodes of this many days")
    max_memories_per_summary: int = Field(default=50, ge=2, le=1000)
    session_id: ScopeId | None = Field(default=None, description="only this session; default: every session")
    reference_time: UtcDatetime | None = Field(default=None, description="what 'now' means; default: now")


class ImportOut(BaseModel):
    group_id: str = Field(description="the group the records were imported into")
    source_group_id: str = Field(description="the group they were exported from")
    source_model: str = Field(description="embedding model of the export")
    reembedded: bool = Field(description="true when the export's vectors were missing or from another model")
    sessions: int = 0
    messages: int = 0
    episodes: int = 0
    summaries: int = 0
    vectors: int = 0


class Readiness(BaseModel):
    status: str
    store: str
    model: str
    recovering: bool


class Health(BaseModel):
    status: str
