"""Domain models: immutable, validated, timestamps always timezone-aware UTC."""

from __future__ import annotations

import json
import math
import uuid as uuid_module
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from memory.errors import InvalidInputError
from memory.ids import MAX_ID_LENGTH, MessageId, ScopeId
from memory.timeutil import parse_timestamp, utc_now

UtcDatetime = Annotated[datetime, BeforeValidator(parse_timestamp)]


MAX_NESTING = 64  # levels of lists and objects inside one value (metadata)
# What a client may put in metadata (a message's, a session's, a group's, an episode's user_metadata): at most
# this many bytes as compact JSON (UTF-8), and no key of epimem's own (it marks redacted messages with one).
MAX_METADATA_BYTES = 16_384
RESERVED_PREFIX = "epimem_"


def metadata_bytes(metadata: Any) -> int:
    """The size of metadata as epimem bounds it: compact JSON, UTF-8."""
    return len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8", "replace"))


def reserved_keys(metadata: Any) -> list[str]:
    """The top-level keys of ``metadata`` that epimem keeps for itself (``RESERVED_PREFIX``)."""
    if not isinstance(metadata, dict):
        return []
    return sorted(key for key in metadata if isinstance(key, str) and key.casefold().startswith(RESERVED_PREFIX))


def check_client_metadata(metadata: Any, where: str = "metadata") -> None:
    """Raise ``InvalidInputError`` (422) for metadata a client may not give: a key of epimem's own, or more
    than ``MAX_METADATA_BYTES``; the message names the key or the bound, never a value."""
    reserved = reserved_keys(metadata)
    if reserved:
        raise InvalidInputError(
            f"{where}: {reserved[0][:100]!r} is reserved for epimem (keys starting with {RESERVED_PREFIX!r} are "
            "set by epimem only)",
            details={"reserved_keys": [key[:100] for key in reserved[:20]]},
        )
    size = metadata_bytes(metadata)
    if size > MAX_METADATA_BYTES:
        raise InvalidInputError(
            f"{where} is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are kept",
            details={"max_metadata_bytes": MAX_METADATA_BYTES, "bytes": size},
        )


def check_client_messages(messages: Sequence[Message]) -> None:
    """``check_client_metadata`` for every message of a batch (the refusal names the message's id)."""
    for message in messages:
        check_client_metadata(message.metadata, f"metadata of message {message.id[:100]!r}")


def value_problem(value: Any, depth: int = 0) -> str | None:
    """What makes a value unfit to store, or None: a lone surrogate in any text, a number that is not
    finite (NaN and Infinity are not JSON, and would be stored as null), nesting deeper than
    ``MAX_NESTING`` (the walk stops there, so no input can exhaust the stack)."""
    if isinstance(value, str):
        lone = has_lone_surrogate(value)
        return "text must be valid Unicode: it holds a lone surrogate such as \\udc00" if lone else None
    if isinstance(value, float):
        return None if math.isfinite(value) else "numbers must be finite: NaN and Infinity are not JSON"
    if isinstance(value, dict | list | tuple | set | frozenset):
        if depth >= MAX_NESTING:
            return f"values may be nested at most {MAX_NESTING} levels deep"
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        for item in items:
            problem = value_problem(item, depth + 1)
            if problem is not None:
                return problem
    return None


def has_lone_surrogate(value: Any) -> bool:
    """Whether text (or any key, value or item inside dicts, lists and tuples) holds a lone surrogate
    ("\\udc00" in JSON): not Unicode text, and no store or export can encode it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(has_lone_surrogate(item) for item in value)
    return False


class ValidUnicode(BaseModel):
    """A model whose text must be valid Unicode (no lone surrogates such as "\\udc00"), whose numbers
    are finite and whose values are nested at most ``MAX_NESTING`` deep (``value_problem``)."""

    @field_validator("*", mode="after")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        problem = value_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class Frozen(ValidUnicode):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class ContentType(StrEnum):
    STRING = "string"


class EpisodeType(StrEnum):
    EPISODE = "episode"
    SUMMARY = "summary"


class GenerationMethod(StrEnum):
    LLM = "llm"
    OFFLINE = "offline"
    FALLBACK = "fallback"


class BoundaryReason(StrEnum):
    TIME_GAP = "time_gap"
    MAX_SIZE = "max_size"
    TOPIC_SHIFT = "topic_shift"
    FLUSH = "flush"
    END_OF_SESSION = "end_of_session"
    LLM = "llm"
    IDLE = "idle"  # the session went quiet: no message arrived for EPIMEM_EPISODE_IDLE_SECONDS
    OPEN = "open"  # not an episode yet: a session's pending messages, as the read path shows them


class Message(Frozen):
    """What was said. Stored verbatim; never rewritten."""

    id: MessageId
    role: Role = Role.USER
    content: str = Field(min_length=1)
    timestamp: UtcDatetime = Field(default_factory=utc_now)
    producer_id: str | None = Field(default=None, max_length=MAX_ID_LENGTH)
    produced_for_id: str | None = Field(default=None, max_length=MAX_ID_LENGTH)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("content")
    @classmethod
    def _content_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be blank")
        return value

    @property
    def speaker(self) -> str:
        return self.producer_id or self.role.value


class MessageState(StrEnum):
    PENDING = "pending"  # stored, not yet in an episode
    FORMING = "forming"  # assigned to an episode that is being written (write-ahead plan)
    DONE = "done"  # its episode is stored and searchable


class StoredMessage(Frozen):
    """A message with its scope and processing state, as kept in the store."""

    group_id: str
    session_id: str
    message: Message
    state: MessageState = MessageState.PENDING
    episode_id: str | None = None
    boundary_reason: BoundaryReason | None = None
    received_at: UtcDatetime = Field(default_factory=utc_now)
    sequence: int = 0


class Episode(Frozen):
    """The memory unit: a titled, third-person account of one stretch of conversation."""

    uuid: str = Field(default_factory=lambda: str(uuid_module.uuid4()))
    episode_type: EpisodeType = EpisodeType.EPISODE
    content_type: ContentType = ContentType.STRING
    title: str = Field(min_length=1)
    content: str = Field(min_length=1)
    timestamp: UtcDatetime
    created_at: UtcDatetime = Field(default_factory=utc_now)
    group_id: ScopeId
    session_id: ScopeId
    producer_id: str | None = None
    produced_for_id: str | None = None
    user_metadata: dict[str, Any] = Field(default_factory=dict)
    source_message_ids: tuple[str, ...] = ()
    message_count: int = Field(ge=0)
    boundary_reason: BoundaryReason
    generation: GenerationMethod
    summarised_by: str | None = None
    # Summaries only (episode_type SUMMARY): the episodes they compact and the span those cover.
    source_episode_ids: tuple[str, ...] = ()
    period_start: UtcDatetime | None = None
    period_end: UtcDatetime | None = None

    @property
    def unit_count(self) -> int:
        """How many memory units a summary compacts (0 for an ordinary episode)."""
        return len(self.source_episode_ids)


class MemoryContext(Frozen):
    """Who a piece of memory belongs to; equal and hashed on group_id + session_id only."""

    group_id: ScopeId
    session_id: ScopeId
    agent_ids: frozenset[str] = frozenset()
    user_ids: frozenset[str] = frozenset()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryContext):
            return NotImplemented
        return (self.group_id, self.session_id) == (other.group_id, other.session_id)

    def __hash__(self) -> int:
        return hash((self.group_id, self.session_id))


class SessionInfo(Frozen):
    group_id: ScopeId
    session_id: ScopeId
    title: str | None = Field(default=None, max_length=1000)
    agent_ids: tuple[str, ...] = ()
    user_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime = Field(default_factory=utc_now)


class GroupConfiguration(Frozen):
    group_id: ScopeId
    description: str | None = Field(default=None, max_length=10_000)
    agent_ids: tuple[str, ...] = ()
    user_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime = Field(default_factory=utc_now)


class Segment(Frozen):
    """A run of consecutive messages of one session that will become one episode."""

    messages: tuple[Message, ...] = Field(min_length=1)
    boundary_reason: BoundaryReason
    topic: str | None = None

    @property
    def message_ids(self) -> tuple[str, ...]:
        return tuple(message.id for message in self.messages)

    @property
    def earliest(self) -> datetime:
        return min(message.timestamp for message in self.messages)
