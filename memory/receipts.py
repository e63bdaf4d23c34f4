"""What a write, a delete and an import report back, defined once: the facade returns them, the HTTP
API sends them as they are, the HTTP client reads them back. Pydantic dataclasses with no storage
imports, so the client (``api/client.py``) returns them without pulling in Chroma, numpy or torch."""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass


@dataclass(frozen=True)
class AddReceipt:
    accepted: list[str] = Field(description="ids stored now")
    duplicates: list[str] = Field(description="ids already stored with the same content (no-op)")
    pending: int = Field(description="messages of the session not yet in an episode")


@dataclass
class DeletionReceipt:
    """What a delete removed, per store; ``ids`` lists every removed record id."""

    collections: list[str] = Field(default_factory=list, description="Chroma collections dropped")
    vectors: int = Field(default=0, description="vectors removed (from partitions and group indexes)")
    log_records: int = Field(default=0, description="message/session/group records removed from the group log")
    ids: list[str] = Field(default_factory=list, description="every removed record id")
    messages: list[str] = Field(default_factory=list, description="message ids removed")
    episodes: list[str] = Field(default_factory=list, description="episode ids removed")
    summaries: list[str] = Field(default_factory=list, description="summary ids removed")
    repaired: list[str] = Field(default_factory=list, description="episodes and summaries rebuilt from what remained")
    caches: list[str] = Field(default_factory=list, description="in-memory caches cleared")

    def merge(self, other: DeletionReceipt) -> None:
        self.collections += other.collections
        self.vectors += other.vectors
        self.log_records += other.log_records
        self.ids += other.ids
        self.messages += other.messages
        self.episodes += other.episodes
        self.summaries += other.summaries
        self.repaired += other.repaired
        self.caches += other.caches


@dataclass
class ImportReceipt:
    group_id: str = Field(description="the group the records were imported into")
    source_group_id: str = Field(description="the group they were exported from")
    source_model: str = Field(description="embedding model of the export")
    reembedded: bool = Field(description="true when the export's vectors were missing or from another model")
    sessions: int = 0
    messages: int = 0
    episodes: int = 0
    summaries: int = 0
    vectors: int = 0


@dataclass
class RedactionReceipt:
    """What a redaction changed (never the text it removed)."""

    message_id: str = Field(description="the redacted message")
    redacted: bool = Field(description="false when the message was already redacted (nothing changed)")
    episodes: list[str] = Field(default_factory=list, description="episodes rebuilt without the redacted text")
    summaries: list[str] = Field(default_factory=list, description="summaries rebuilt or removed")
    caches: list[str] = Field(default_factory=list, description="in-memory caches cleared")
