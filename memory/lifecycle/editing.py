"""Correcting memory: an episode's title, text or metadata edited (with its history), a message's text
redacted (its record, id, speaker and time kept; what was built from it rebuilt; the old text erased
from the data folder as a delete erases it). Locking is the caller's (``memory.service``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from memory.embedding.embedder import Embedder
from memory.errors import InvalidInputError, NotFoundError
from memory.ids import GROUP_SUMMARY_SESSION
from memory.lifecycle.deletion import Rewrites
from memory.lifecycle.revisions import RevisionKind
from memory.lifecycle.tombstones import Erased, Tombstones, said
from memory.models import Episode, EpisodeType, Frozen, StoredMessage, check_client_metadata
from memory.receipts import RedactionReceipt
from memory.store.records import EPISODE_KINDS, RecordFilter, RecordKind, VectorRecord
from memory.text import message_line
from memory.timeutil import utc_now

DEFAULT_REPLACEMENT = "[redacted]"
REDACTED_MARK = "epimem_redacted"  # set to true in a redacted message's metadata
MAX_TITLE = 500
MAX_CONTENT = 100_000


def _not_blank(value: str | None, name: str) -> None:
    if value is not None and not value.strip():
        raise ValueError(f"{name} must not be blank")


class EpisodeCorrection(Frozen):
    """What a correction changes (any of title, content, user_metadata) and why."""

    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE)
    content: str | None = Field(default=None, min_length=1, max_length=MAX_CONTENT)
    user_metadata: dict[str, Any] | None = None
    reason: str | None = Field(default=None, max_length=1000)

    @model_validator(mode="after")
    def _changes_something(self) -> EpisodeCorrection:
        if self.title is None and self.content is None and self.user_metadata is None:
            raise ValueError("a correction needs at least one of title, content, user_metadata")
        _not_blank(self.title, "title")
        _not_blank(self.content, "content")
        if self.user_metadata is not None:
            check_client_metadata(self.user_metadata, "user_metadata")
        return self


class Redaction(Frozen):
    replacement: str = Field(default=DEFAULT_REPLACEMENT, min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _visible(self) -> Redaction:
        _not_blank(self.replacement, "replacement")
        return self


class Editor:
    def __init__(self, parts: Rewrites, *, embedder: Embedder) -> None:
        self._log, self._vectors, self._admin = parts.log, parts.vectors, parts.admin
        self._summariser, self._reformer = parts.summariser, parts.reformer
        self._embedder = embedder
        self.revisions = parts.reformer.revisions
        self._tombstones = Tombstones(parts.log)

    def episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        selection = RecordFilter(session_ids=(session_id,), kinds=EPISODE_KINDS)
        found = self._vectors.episodes(group_id, ids=[episode_id], selection=selection)
        if not found:
            raise NotFoundError("no such episode in this session")
        return found[0]

    # -- corrections ----------------------------------------------------------------------------------

    def correct(
        self, group_id: str, session_id: str, episode_id: str, correction: EpisodeCorrection, *, actor: str
    ) -> Episode:
        """The corrected episode, stored, embedded and indexed at once; a correction that changes nothing
        adds no revision. Summaries citing the episode are rebuilt from it."""
        episode = self.episode(group_id, session_id, episode_id)
        if episode.episode_type is EpisodeType.SUMMARY:
            raise InvalidInputError("a summary is rebuilt from its sources: correct the episodes it compacts")
        fields = ("title", "content", "user_metadata")
        updates = {name: value for name in fields if (value := getattr(correction, name)) is not None}
        after = Episode.model_validate({**episode.model_dump(), **updates})
        if all(getattr(after, name) == getattr(episode, name) for name in fields):
            return episode
        # The history first: a retry after a failure in between writes the episode again.
        self.revisions.write_next(
            episode, after, kind=RevisionKind.CORRECTION, actor=actor, reason=correction.reason, at=utc_now()
        )
        self._reformer.write(after)
        self._repair_summaries(group_id, {episode_id})
        return after

    # -- redaction ----------------------------------------------------------------------------------------

    def redact(self, group_id: str, session_id: str, message_id: str, redaction: Redaction) -> RedactionReceipt:
        stored = self._log.get_messages(group_id, session_id, [message_id]).get(message_id)
        if stored is None:
            raise NotFoundError("no such message in this session")
        if self._redacted_already(group_id, stored, redaction):
            return RedactionReceipt(message_id=message_id, redacted=False)
        metadata = {k: v for k, v in stored.message.metadata.items() if k != "image_caption"}  # said, like content
        message = stored.message.model_copy(
            update={"content": redaction.replacement, "metadata": {**metadata, REDACTED_MARK: True}}
        )
        redacted = stored.model_copy(update={"message": message})
        self._log.put_messages(group_id, [redacted])
        self._tombstones.bury(group_id, [(Erased.REDACTED, session_id, message_id), said(session_id, stored.message)])
        vector = self._embedder.embed_batch([message_line(message)])[0]
        self._vectors.replace(group_id, session_id, VectorRecord.of_message(redacted, vector))
        receipt = RedactionReceipt(message_id=message_id, redacted=True)
        selection = RecordFilter(session_ids=(session_id,), kinds=(RecordKind.EPISODE,))
        for episode in self._vectors.episodes(group_id, selection=selection):
            if message_id not in episode.source_message_ids:
                continue
            found = self._log.get_messages(group_id, session_id, list(episode.source_message_ids))
            messages = sorted((s.message for s in found.values()), key=lambda m: m.timestamp)
            reason = f"source message {message_id} redacted"
            self._reformer.reform(episode, messages, kind=RevisionKind.REDACTED, reason=reason)
            receipt.episodes.append(episode.uuid)
        receipt.summaries += self._repair_summaries(group_id, set(receipt.episodes))
        self._admin.erase(group_id, [session_id, GROUP_SUMMARY_SESSION])
        return receipt

    def _redacted_already(self, group_id: str, stored: StoredMessage, redaction: Redaction) -> bool:
        """Whether a redaction would change nothing: the message carries the mark and either a redaction of
        this group wrote it or its text is a replacement already. The mark alone is not enough: an import of
        another group's export may carry it over text that was never redacted."""
        if stored.message.metadata.get(REDACTED_MARK) is not True:
            return False
        if stored.message.content in (DEFAULT_REPLACEMENT, redaction.replacement):
            return True
        key = (Erased.REDACTED, stored.session_id, stored.message.id)
        return bool(self._tombstones.erased(group_id, [key]))

    def _repair_summaries(self, group_id: str, episode_ids: set[str]) -> list[str]:
        changed: list[str] = []
        if episode_ids:
            for summary in self._summariser.summaries_citing(group_id, episode_ids):
                self._summariser.refresh(group_id, summary)
                changed.append(summary.uuid)
        return changed
