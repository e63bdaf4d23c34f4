"""What a write, a delete and an import report back: plain dataclasses with no storage imports, so
the HTTP client (``api/client.py``) can return them without pulling in Chroma, numpy or torch."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AddReceipt:
    accepted: list[str]
    duplicates: list[str]
    pending: int


@dataclass
class DeletionReceipt:
    """What a delete removed, per store; ``ids`` lists every removed record id.

    ``collections``: dropped Chroma collections; ``vectors``: records removed from partitions and
    group indexes; ``log_records``: records removed from the group log. ``messages``, ``episodes``
    and ``summaries`` name what was removed; ``repaired`` the episodes and summaries rebuilt from
    what remained; ``caches`` the in-memory caches that were cleared.
    """

    collections: list[str] = field(default_factory=list)
    vectors: int = 0
    log_records: int = 0
    ids: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    episodes: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    caches: list[str] = field(default_factory=list)

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
    group_id: str
    source_group_id: str
    source_model: str
    reembedded: bool
    sessions: int = 0
    messages: int = 0
    episodes: int = 0
    summaries: int = 0
    vectors: int = 0
