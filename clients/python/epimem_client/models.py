"""What the client returns: the HTTP API's response bodies as small, frozen pydantic models. They mirror
the server's response schemas field for field (a test compares them with the server's OpenAPI document),
and ignore fields they do not know, so a newer server does not break an older client."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WireModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def _now() -> datetime:
    return datetime.now(UTC)


class Message(WireModel):
    """What was said. As input, ``timestamp`` defaults to now (give every message its own)."""

    id: str
    role: str = "user"
    content: str
    timestamp: datetime = Field(default_factory=_now)
    producer_id: str | None = None
    produced_for_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def speaker(self) -> str:
        return self.producer_id or self.role


class Episode(WireModel):
    """The memory unit: a titled, third-person account of one stretch of conversation."""

    uuid: str
    episode_type: str
    content_type: str
    title: str
    content: str
    timestamp: datetime
    created_at: datetime
    group_id: str
    session_id: str
    producer_id: str | None
    produced_for_id: str | None
    user_metadata: dict[str, Any]
    source_message_ids: tuple[str, ...]
    message_count: int
    boundary_reason: str
    generation: str
    summarised_by: str | None
    source_episode_ids: tuple[str, ...]
    period_start: datetime | None
    period_end: datetime | None

    @property
    def unit_count(self) -> int:
        """How many memory units a summary compacts (0 for an ordinary episode)."""
        return len(self.source_episode_ids)


class SessionInfo(WireModel):
    group_id: str
    session_id: str
    title: str | None = None
    agent_ids: tuple[str, ...] = ()
    user_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=_now)
    updated_at: datetime = Field(default_factory=_now)


class GroupConfiguration(WireModel):
    group_id: str
    description: str | None = None
    agent_ids: tuple[str, ...] = ()
    user_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=_now)
    updated_at: datetime = Field(default_factory=_now)


class GroupStats(WireModel):
    """What a group holds: counts, and the time span of its messages and episodes."""

    group_id: str
    description: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    sessions: int
    messages: int
    episodes: int
    pending: int = 0  # messages stored and recallable, not in an episode yet
    first: datetime | None = None
    last: datetime | None = None
    unreadable: str | None = None  # in a list of groups: why its counts could not be read (they are 0 then)


class GroupsOut(WireModel):
    groups: list[GroupStats]
    next_cursor: str | None


class ScoreComponents(WireModel):
    vector: float
    keyword: float
    fused: float
    recency: float
    evidence: float = 0.0  # best score of the episode's messages (before recency)
    raw: float = 0.0  # the ranking score, unbounded; the hit's ``score`` is it on the fixed 0..1 scale


class SearchHit(WireModel):
    episode: Episode
    score: float
    components: ScoreComponents
    matched_message_ids: list[str]
    messages: list[Message] | None
    pending: bool = False  # a session's open episode: messages not in an episode yet (boundary_reason "open")


class TimelinePage(WireModel):
    episodes: list[Episode]
    next_cursor: str | None
    pending: list[str] = Field(default_factory=list)  # ids of this page's open episodes (messages not in one yet)


class Excerpt(WireModel):
    message_id: str
    start: int  # the excerpt's first character in the message's content (code points)
    end: int  # one past its last character


class Citation(WireModel):
    marker: str = ""  # the marker that opens this piece in the context text: "[1]" for the first citation, ...
    episode_id: str
    session_id: str
    timestamp: datetime
    message_ids: list[str]
    pending: bool = False  # the messages are not in an episode yet (episode_id: their session's open episode)
    excerpts: list[Excerpt] = Field(default_factory=list)  # messages the text holds in part, with their spans


class ContextResult(WireModel):
    text: str
    citations: list[Citation]
    tokens: int


class AddReceipt(WireModel):
    accepted: list[str]
    duplicates: list[str]
    pending: int


class DeletionReceipt(WireModel):
    collections: list[str]
    vectors: int
    log_records: int
    ids: list[str]
    messages: list[str]
    episodes: list[str]
    summaries: list[str]
    repaired: list[str]
    caches: list[str]


class ImportReceipt(WireModel):
    group_id: str
    source_group_id: str
    source_model: str
    reembedded: bool
    sessions: int
    messages: int
    episodes: int
    summaries: int
    vectors: int


class RedactionReceipt(WireModel):
    message_id: str
    redacted: bool  # false: the message was redacted already (nothing changed)
    episodes: list[str]
    summaries: list[str]
    caches: list[str]


class Revision(WireModel):
    """One state of an episode: revision 0 as generated, then corrections and re-formations."""

    revision: int
    kind: str  # generated | correction | reformed | redacted
    title: str
    content: str
    user_metadata: dict[str, Any]
    changed_at: datetime
    changed_by: str
    reason: str | None
    superseded: bool = False
    erased: bool = False


class AuditEntry(WireModel):
    id: str
    at: datetime
    actor: str
    action: str
    session_id: str | None
    target_ids: list[str]
    target_count: int
    counts: dict[str, int] = Field(default_factory=dict)  # a retention sweep's receipt: how many of each kind
    ids: dict[str, list[str]] = Field(default_factory=dict)  # ... and which (at most 100 of each kind)
    ids_left_out: int = 0


class AuditPage(WireModel):
    entries: list[AuditEntry]
    next_cursor: str | None


class StoredPolicy(WireModel):
    """A retention policy: messages older than ``max_age_days`` (by ``timestamp`` or ``arrival``) are erased."""

    max_age_days: float
    by: str = "timestamp"
    session_id: str | None = None
    updated_at: datetime


class RetentionPolicies(WireModel):
    group_id: str
    group: StoredPolicy | None
    sessions: list[StoredPolicy]


class RetentionReceipt(WireModel):
    """What a sweep erased (or, in a dry run, would erase): ids and counts, never content."""

    group_id: str
    dry_run: bool
    swept_at: datetime
    sessions: list[str] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)
    episodes: list[str] = Field(default_factory=list)
    summaries: list[str] = Field(default_factory=list)
    repaired: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)


class Cleared(WireModel):
    cleared: bool


class WebhookOut(WireModel):
    """A webhook subscription (its secret is never shown after it was made)."""

    id: str
    url: str
    groups: list[str]
    created_at: str
    created_by: str
    description: str | None = None


class Attempt(WireModel):
    at: str
    event_id: str
    event_type: str
    session_id: str | None
    outcome: str
    status_code: int | None = None
    error: str | None = None
    failures: int = 0
    duration_ms: float = 0.0


class DeliveryLog(WireModel):
    subscription: dict[str, Any]
    pending: int
    attempts: list[Attempt]


# Response wrappers: every response is a JSON object that can grow.
class WebhooksOut(WireModel):
    webhooks: list[WebhookOut]


class CorrectedOut(WireModel):
    episode: Episode


class RevisionsOut(WireModel):
    revisions: list[Revision]


class EpisodesOut(WireModel):
    episodes: list[Episode]


class MessageOut(WireModel):
    message: Message


class EpisodeOut(WireModel):
    episode: Episode
    messages: list[Message] | None
    pending: bool = False


class SessionsOut(WireModel):
    sessions: list[SessionInfo]


class SearchOut(WireModel):
    hits: list[SearchHit]


class HistoryOut(WireModel):
    messages: list[Message]
    next_cursor: str | None


class MessagePage(list[Message]):
    """A page of a session's messages in event-time order (``history``): a list of them, with ``next_cursor``
    (pass it back as ``cursor`` for the next page; None: the last page)."""

    def __init__(self, messages: Iterable[Message] = (), next_cursor: str | None = None) -> None:
        super().__init__(messages)
        self.next_cursor = next_cursor
