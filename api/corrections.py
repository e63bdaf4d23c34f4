"""Correcting memory through the facade: episodes corrected with their history, messages redacted, the
audit trail read (memory.lifecycle.editing, memory.lifecycle.audit). Mixed into ``api.facade.Epimem``."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory import tracing
from memory.errors import InvalidInputError
from memory.ids import require_scope_ids
from memory.lifecycle.audit import LOCAL_ACTOR, AuditPage
from memory.lifecycle.editing import DEFAULT_REPLACEMENT, EpisodeCorrection, Redaction
from memory.lifecycle.revisions import Revision
from memory.models import Episode
from memory.receipts import RedactionReceipt
from memory.service import MemoryService
from memory.tracing import memory_operation

M = TypeVar("M", bound=BaseModel)


def _validated(model: type[M], values: dict[str, Any]) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise InvalidInputError(error.errors(include_url=False)[0]["msg"]) from error


class Corrections:
    memory: MemoryService

    @memory_operation("update_memory", tracing.on_episode)
    def correct_episode(
        self,
        group_id: str,
        session_id: str,
        episode_id: str,
        *,
        title: str | None = None,
        content: str | None = None,
        user_metadata: dict[str, Any] | None = None,
        reason: str | None = None,
        actor: str = LOCAL_ACTOR,
    ) -> Episode:
        """Correct an episode's title, content and/or user_metadata: stored as a new revision, embedded and
        indexed at once; its source messages are not changed."""
        require_scope_ids(group_id, session_id)
        correction = _validated(
            EpisodeCorrection, {"title": title, "content": content, "user_metadata": user_metadata, "reason": reason}
        )
        return self.memory.correct_episode(group_id, session_id, episode_id, correction, actor=actor)

    def episode_revisions(self, group_id: str, session_id: str, episode_id: str) -> list[Revision]:
        """The episode's history, oldest first: revision 0 is the generated episode."""
        require_scope_ids(group_id, session_id)
        return self.memory.revisions(group_id, session_id, episode_id)

    @memory_operation("update_memory", tracing.on_message)
    def redact_message(
        self,
        group_id: str,
        session_id: str,
        message_id: str,
        *,
        replacement: str = DEFAULT_REPLACEMENT,
        actor: str = LOCAL_ACTOR,
    ) -> RedactionReceipt:
        """Replace a message's text (its record, id, speaker and time stay); the episodes built from it
        are rebuilt and the old text is erased from the data folder. Redacting again changes nothing."""
        require_scope_ids(group_id, session_id)
        redaction = _validated(Redaction, {"replacement": replacement})
        return self.memory.redact_message(group_id, session_id, message_id, redaction, actor=actor)

    def audit(self, group_id: str, *, limit: int = 50, cursor: str | None = None) -> AuditPage:
        """The group's audit trail, newest first (memory.lifecycle.audit)."""
        require_scope_ids(group_id)
        return self.memory.audit_page(group_id, limit=limit, cursor=cursor)
