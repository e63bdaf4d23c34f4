"""The history of an episode: revision 0 is what epimem generated, each later revision a correction
(``memory.lifecycle.editing``) or a re-formation after its source messages changed.

Stored in the group log (kind ``revision``, one record per revision, keyed by session and episode),
only for episodes that were ever corrected: the history of an episode never corrected is its one
generated revision, read from the episode itself, so formation writes nothing more.

Rules when the sources of an episode change (``reformed``): a message of it deleted or redacted, the
episode is generated again from what remains and that becomes the episode; every earlier revision loses
its text (``erased``: empty title, content, metadata and reason), corrections included (any of them could
quote the erased words), and a correction is marked ``superseded``; who changed what and when stays.

A correction whose sources are unchanged stays the episode through everything else: formation never
touches a formed episode, a model change re-embeds the stored (corrected) text, export and import
carry the history.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memory.models import Episode, UtcDatetime
from memory.store.protocols import LogWriter

KIND = "revision"
SYSTEM_ACTOR = "epimem"  # who re-forms an episode when its sources change


class RevisionKind(StrEnum):
    GENERATED = "generated"  # revision 0: the episode as epimem made it
    CORRECTION = "correction"  # a person's (an application's) edit
    REFORMED = "reformed"  # made again after a source message was deleted
    REDACTED = "redacted"  # made again after a source message was redacted


class Revision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    revision: int = Field(ge=0, description="0 is the generated episode; each change adds one")
    kind: RevisionKind
    title: str
    content: str
    user_metadata: dict[str, Any] = Field(default_factory=dict)
    changed_at: UtcDatetime
    changed_by: str = Field(description="the API key's name or id (never its secret); 'local' in local mode")
    reason: str | None = None
    superseded: bool = Field(
        default=False, description="a correction replaced by a re-formation after its source messages changed"
    )
    erased: bool = Field(
        default=False, description="its text was removed because a source message was deleted or redacted"
    )


def _record_prefix(session_id: str, episode_id: str) -> str:
    digest = hashlib.sha256(f"{session_id}\x1f{episode_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"rev-{digest[:40]}-"


def revision_of(
    episode: Episode, *, revision: int, kind: RevisionKind, at: datetime, actor: str, reason: str | None = None
) -> Revision:
    """The episode's title, content and metadata as its revision number ``revision``."""
    return Revision(
        revision=revision,
        kind=kind,
        title=episode.title,
        content=episode.content,
        user_metadata=dict(episode.user_metadata),
        changed_at=at,
        changed_by=actor,
        reason=reason,
    )


def generated(episode: Episode) -> Revision:
    """Revision 0 of an episode never corrected: the episode itself."""
    return revision_of(episode, revision=0, kind=RevisionKind.GENERATED, at=episode.created_at, actor=SYSTEM_ACTOR)


class RevisionLog:
    def __init__(self, log: LogWriter) -> None:
        self._log = log

    def stored(self, group_id: str, session_id: str, episode_id: str) -> list[Revision]:
        prefix = _record_prefix(session_id, episode_id)
        rows = [(i, d) for i, d, _ in self._log.records(group_id, KIND) if i.startswith(prefix)]
        return sorted((Revision.model_validate_json(d) for _, d in rows), key=lambda r: r.revision)

    def history(self, episode: Episode) -> list[Revision]:
        """Oldest first; an episode never corrected has its generated revision only."""
        return self.stored(episode.group_id, episode.session_id, episode.uuid) or [generated(episode)]

    def everything(self, group_id: str) -> dict[tuple[str, str], list[Revision]]:
        """(session id, episode id) -> stored revisions, oldest first (what export writes)."""
        found: dict[tuple[str, str], list[Revision]] = {}
        for _, document, metadata in self._log.records(group_id, KIND):
            key = (str(metadata.get("session_id", "")), str(metadata.get("episode_id", "")))
            found.setdefault(key, []).append(Revision.model_validate_json(document))
        return {key: sorted(items, key=lambda r: r.revision) for key, items in found.items()}

    def put(self, group_id: str, session_id: str, episode_id: str, revisions: list[Revision]) -> None:
        prefix = _record_prefix(session_id, episode_id)
        for revision in revisions:
            metadata = {"kind": KIND, "session_id": session_id, "episode_id": episode_id, "revision": revision.revision}
            self._log.put_record(group_id, f"{prefix}{revision.revision:06d}", revision.model_dump_json(), metadata)

    def write_next(
        self, before: Episode, after: Episode, *, kind: RevisionKind, actor: str, reason: str | None, at: datetime
    ) -> int:
        """Store ``after`` as the next revision of ``before``'s history (whose revision 0 is written
        first when nothing was stored yet). Returns the new revision's number."""
        history = self.stored(before.group_id, before.session_id, before.uuid)
        new: list[Revision] = [] if history else [generated(before)]
        number = len(history) or 1
        new.append(revision_of(after, revision=number, kind=kind, at=at, actor=actor, reason=reason))
        self.put(before.group_id, before.session_id, before.uuid, new)
        return number

    def reformed(self, before: Episode, after: Episode, *, kind: RevisionKind, reason: str, at: datetime) -> int:
        """The sources of a corrected episode changed and ``after`` was generated from them: earlier
        revisions are erased (per the module's rules) and ``after`` appended. An episode never corrected
        keeps no history (its new self is its revision 0). Returns the episode's revision number (0 when
        no history is kept)."""
        history = self.stored(before.group_id, before.session_id, before.uuid)
        if not history:
            return 0
        marked = [_marked(item) for item in history]
        number = len(history)
        marked.append(revision_of(after, revision=number, kind=kind, at=at, actor=SYSTEM_ACTOR, reason=reason))
        self.put(before.group_id, before.session_id, before.uuid, marked)
        return number

    def remove(self, group_id: str, session_id: str, episode_ids: list[str]) -> int:
        prefixes = tuple(_record_prefix(session_id, e) for e in episode_ids)
        if not prefixes:
            return 0
        ids = [i for i, _, _ in self._log.records(group_id, KIND) if i.startswith(prefixes)]
        return self._log.delete_records(group_id, ids) if ids else 0


def _marked(revision: Revision) -> Revision:
    update: dict[str, Any] = {"title": "", "content": "", "user_metadata": {}, "reason": None, "erased": True}
    if revision.kind is RevisionKind.CORRECTION and not revision.erased:
        update["superseded"] = True
    return revision.model_copy(update=update)
