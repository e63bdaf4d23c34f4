"""An episode made again from its source messages after they changed (a message deleted or redacted):
same id (links stay valid), same generator, markers kept, its revision history updated by the rules
of ``memory.lifecycle.revisions``."""

from __future__ import annotations

from collections.abc import Sequence

from memory.embedding.embedder import Embedder
from memory.episodes.generation import EpisodeGenerator
from memory.lifecycle.revisions import RevisionKind, RevisionLog
from memory.models import Episode, Message, Segment
from memory.store.protocols import VectorWriter
from memory.store.records import VectorRecord
from memory.text import episode_embedding_text
from memory.timeutil import utc_now


class Reformer:
    def __init__(
        self, *, vectors: VectorWriter, embedder: Embedder, generator: EpisodeGenerator, revisions: RevisionLog
    ) -> None:
        self._vectors = vectors
        self._embedder = embedder
        self._generator = generator
        self.revisions = revisions

    def reform(self, episode: Episode, messages: Sequence[Message], *, kind: RevisionKind, reason: str) -> Episode:
        """The episode again from ``messages`` (what remains, in time order)."""
        segment = Segment(messages=tuple(messages), boundary_reason=episode.boundary_reason)
        made = self._generator.generate(
            segment, group_id=episode.group_id, session_id=episode.session_id, episode_id=episode.uuid
        )
        rebuilt = made.model_copy(
            update={"summarised_by": episode.summarised_by, "user_metadata": episode.user_metadata}
        )
        self.revisions.reformed(episode, rebuilt, kind=kind, reason=reason, at=utc_now())
        self.write(rebuilt)
        return rebuilt

    def write(self, episode: Episode) -> None:
        """Store an episode in place of the record with its id, embedded and indexed at once."""
        vector = self._embedder.embed_batch([episode_embedding_text(episode)])[0]
        self._vectors.replace(episode.group_id, episode.session_id, VectorRecord.of_episode(episode, vector))
