"""What the MCP tools take and return: their argument types (each described for the agent), the hit
shape, and how a refusal names what is wrong without quoting the caller's values."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from memory.errors import InvalidInputError
from memory.ids import MAX_ID_LENGTH
from memory.models import Message, Role
from memory.timeutil import parse_timestamp
from retrieval.filters import RecallFilter

TIMESTAMP_RULE = (
    "a timestamp is ISO 8601 (naive is UTC) or seconds since 1970 UTC, between 0001-01-02 and 9999-12-30 "
    "(a number in milliseconds is out of range: divide it by 1000)"
)


def _timestamp(value: Any) -> Any:
    """What HTTP accepts (``memory.timeutil.parse_timestamp``), refused without quoting the value."""
    try:
        return parse_timestamp(value)
    except (InvalidInputError, ValueError, TypeError):
        raise ValueError(TIMESTAMP_RULE) from None


Timestamp = Annotated[datetime, BeforeValidator(_timestamp)]


class ChatMessage(BaseModel):
    """One message of a conversation: the fields of a message over HTTP, in the clients and in files, with the
    same names and the same checks (``to_message`` validates it as ``memory.models.Message``). A field it does
    not have is refused by name, never dropped."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="stable id of the message; re-sending the same id is a no-op")
    content: str = Field(description="what was said")
    role: Role = Field(default=Role.USER, description="user, assistant, system or tool")
    producer_id: str | None = Field(default=None, max_length=MAX_ID_LENGTH, description="who said it (a name or id)")
    produced_for_id: str | None = Field(default=None, max_length=MAX_ID_LENGTH, description="who it was said to")
    timestamp: Timestamp | None = Field(
        default=None, description="when it was said (ISO 8601, or seconds since 1970 UTC); default: now"
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="anything else about it (JSON values)")

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, value: Any) -> Any:
        if isinstance(value, dict) and "speaker" in value:
            raise ValueError("'speaker' is not a field of a message: who said it is 'producer_id'")
        return value

    def to_message(self) -> Message:
        """The domain message (a message sent without a timestamp is stamped on arrival, as over HTTP)."""
        return Message.model_validate(self.model_dump(exclude_unset=True))


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
RefTimeArg = Annotated[Timestamp | None, Field(description="what 'now' means for `time` (ISO 8601); default: now")]
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
