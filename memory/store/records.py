"""What the store hands out and takes in, in the store's own terms (no Chroma types or query syntax):
vector records with typed accessors, query hits, and the filter the read path describes its scope with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.models import Episode, StoredMessage
from memory.store import codec
from memory.store.filters import EPISODE_KINDS, RecordFilter, RecordKind
from memory.store.record_format import fitted_text

__all__ = [
    "EPISODE_KINDS",
    "RecordFilter",
    "RecordKind",
    "Row",
    "VectorHit",
    "VectorRecord",
    "is_open_episode_id",
    "message_record_id",
    "open_episode_id",
]

Row = tuple[str, str, dict[str, Any]]  # a log record: id, document, metadata


# The id of a message's vector record (and of its log record), from its session and message id.
message_record_id = codec.message_record_id
# The episode id a session's pending messages carry until they are formed (memory.store.codec).
open_episode_id = codec.open_episode_id
is_open_episode_id = codec.is_open_episode_id


@dataclass(frozen=True)
class VectorRecord:
    """One vector in a partition and in its group's index: an episode, a summary or a message."""

    id: str
    document: str
    metadata: dict[str, Any]
    embedding: np.ndarray | None = None

    @classmethod
    def of_episode(cls, episode: Episode, embedding: np.ndarray | None = None) -> VectorRecord:
        return cls(episode.uuid, episode.content, codec.episode_metadata(episode), embedding)

    @classmethod
    def of_message(cls, stored: StoredMessage, embedding: np.ndarray | None = None) -> VectorRecord:
        """A message's vector record. It carries the message's text as far as one document holds it (all of a
        message of up to ~16,000 characters of ASCII; the log keeps every message whole)."""
        record_id = codec.message_record_id(stored.session_id, stored.message.id)
        metadata = codec.message_vector_metadata(stored)
        text = fitted_text(stored.message.content, codec.packed_apart(metadata)[1])
        return cls(record_id, text, metadata, embedding)

    def with_embedding(self, embedding: np.ndarray) -> VectorRecord:
        return VectorRecord(self.id, self.document, self.metadata, embedding)

    @property
    def kind(self) -> str:
        return str(self.metadata.get("kind", ""))

    @property
    def is_episode(self) -> bool:
        """An episode or a summary."""
        return self.kind in EPISODE_KINDS

    @property
    def is_message(self) -> bool:
        return self.kind == RecordKind.MESSAGE

    @property
    def session_id(self) -> str:
        return str(self.metadata.get("session_id", ""))

    @property
    def episode_id(self) -> str:
        """The episode the record belongs to (an episode's own id; a message's episode)."""
        return str(self.metadata.get("episode_id", self.id))

    @property
    def message_id(self) -> str:
        return str(self.metadata.get("message_id", ""))

    @property
    def timestamp(self) -> float:
        """Event time as epoch seconds."""
        return float(self.metadata.get("ts", 0.0))

    @property
    def producer_id(self) -> str:
        return str(self.metadata.get("producer_id") or "")

    @property
    def produced_for_id(self) -> str:
        return str(self.metadata.get("produced_for_id") or "")

    @property
    def title(self) -> str:
        return str(self.metadata.get("title", ""))

    @property
    def summarised_by(self) -> str | None:
        value = self.metadata.get("summarised_by")
        return str(value) if value else None

    def episode(self) -> Episode:
        """The episode or summary this record stores."""
        return codec.episode_from_record(self.document, self.metadata)


@dataclass(frozen=True)
class VectorHit:
    """A nearest-neighbour result: the record and its cosine distance to the query."""

    record: VectorRecord
    distance: float

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def similarity(self) -> float:
        return 1.0 - self.distance
