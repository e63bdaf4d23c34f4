"""What the read path takes and returns."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memory.ids import ScopeId
from memory.models import Episode, Message, UtcDatetime
from retrieval.filters import RecallFilter

MAX_K = 200
MAX_TIMELINE_LIMIT = 500
MAX_TOKEN_BUDGET = 100_000


class Order(StrEnum):
    RELEVANCE = "relevance"
    CHRONOLOGICAL = "chronological"


class Direction(StrEnum):
    ASC = "asc"
    DESC = "desc"


class Scope(BaseModel):
    """Which part of a group to read: sessions and a time window (absolute and/or natural language)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_ids: list[ScopeId] | None = Field(default=None, min_length=1, max_length=1000)
    start: UtcDatetime | None = None
    end: UtcDatetime | None = None
    time: str | None = Field(default=None, max_length=200, description="e.g. 'last week', 'in March 2023'")
    reference_time: UtcDatetime | None = Field(default=None, description="what 'now' means for `time`")
    timezone: str = Field(default="UTC", max_length=64)
    filter: RecallFilter | None = Field(
        default=None, description="only these speakers, roles, episode types, metadata values (retrieval.filters)"
    )

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        """An IANA name ("Europe/Berlin") or UTC, checked whether or not the request names a time: a name
        that is not a timezone is a mistake to say, not to ignore."""
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as error:
            raise ValueError("unknown timezone: give an IANA name such as 'Europe/Berlin', or 'UTC'") from error
        return value

    @model_validator(mode="after")
    def _window_is_ordered(self) -> Scope:
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise ValueError("start must be before end")
        return self


class SearchQuery(Scope):
    query: str = Field(min_length=1, max_length=10_000)
    k: int = Field(default=10, ge=1, le=MAX_K)
    order: Order = Order.RELEVANCE
    expand: bool = False
    recency_weight: float = Field(default=0.0, ge=0.0, le=1.0)
    recency_half_life_days: float = Field(default=30.0, gt=0)
    dedupe: bool = Field(default=True, description="drop near-duplicate episodes (same text or episode vectors)")
    min_score: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="only the hits whose `score` (0..1, one scale for every query) is at least this: 0 keeps every "
        "hit, 0.05 drops nearly every hit of a question that memory cannot answer (docs: Retrieval, Scores)",
    )


class ContextQuery(Scope):
    query: str = Field(min_length=1, max_length=10_000)
    token_budget: int = Field(default=1000, ge=16, le=MAX_TOKEN_BUDGET)
    recency_weight: float = Field(default=0.0, ge=0.0, le=1.0)
    recency_half_life_days: float = Field(default=30.0, gt=0)


class ScoreComponents(BaseModel):
    vector: float = Field(description="best cosine similarity of the episode or one of its messages")
    keyword: float = Field(description="best BM25 score of the episode or one of its messages")
    fused: float = Field(description="reciprocal-rank fusion of the two rankings")
    recency: float = Field(default=1.0, description="multiplier from recency weighting")
    evidence: float = Field(
        default=0.0, description="best score of the episode's messages under the message scoring (before recency)"
    )
    raw: float = Field(
        default=0.0,
        description="the ranking score, (fused + 2.0 x evidence) x recency: unbounded, comparable within one "
        "response only; the hit's `score` is it on the fixed 0..1 scale",
    )


class SearchHit(BaseModel):
    episode: Episode
    score: float = Field(
        ge=0.0,
        le=1.0,
        description="from 0 to 1 on one scale for every query: about the chance that the hit holds what the query "
        "asks (fitted on LoCoMo dev); `components.raw` on a fixed rising curve, so the hits keep its order",
    )
    components: ScoreComponents
    matched_message_ids: list[str] = Field(default_factory=list)
    messages: list[Message] | None = None
    pending: bool = Field(
        default=False,
        description="the hit is a session's open episode: messages stored and recallable, not in an episode yet "
        "(its episode's boundary_reason is 'open'; it becomes a real episode once the session's segment closes)",
    )


class TimelinePage(BaseModel):
    episodes: list[Episode]
    next_cursor: str | None = None
    pending: list[str] = Field(
        default_factory=list,
        description="ids of the episodes of this page that are sessions' open episodes: messages stored and "
        "recallable, not in an episode yet (boundary_reason 'open'); each becomes episodes once its session's "
        "segment closes",
    )


class Excerpt(BaseModel):
    """A message the context holds in part: its id and the span of its content the context text holds."""

    message_id: str
    start: int = Field(ge=0, description="the excerpt's first character in the message's content (code points)")
    end: int = Field(ge=0, description="one past its last character")


class Citation(BaseModel):
    marker: str = Field(
        description="the marker that opens this piece in the context text: '[1]' for the first citation, "
        "'[2]' for the second, ... (citation i of the list is marker [i + 1])",
        examples=["[1]"],
    )
    episode_id: str
    session_id: str
    timestamp: datetime
    message_ids: list[str]
    pending: bool = Field(
        default=False, description="the messages are not in an episode yet (episode_id is the session's open episode)"
    )
    excerpts: list[Excerpt] = Field(
        default_factory=list,
        description="the messages of message_ids the text holds in part ('speaker (excerpt): … text …'), each with "
        "the span of its content that it holds; a message not listed is held whole",
    )


class ContextResult(BaseModel):
    text: str
    citations: list[Citation]
    tokens: int


__all__ = [
    "Citation",
    "Excerpt",
    "ContextQuery",
    "ContextResult",
    "Direction",
    "Order",
    "Scope",
    "ScoreComponents",
    "SearchHit",
    "SearchQuery",
    "TimelinePage",
]
