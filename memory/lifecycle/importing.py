"""Import: what an export file may add to a group, and nothing else (docs/trust.md, "Import cannot rewrite
history").

- **Only what is absent is added.** A record whose id the group already holds must equal the stored one in
  every field, or the import is refused with 409 (``details.ids``) before anything is written: a message (what
  was said, and in a restore also its processing state), an episode or summary (every field), a session or the
  group's configuration (every field but when this group created and updated it), an episode's revisions (its
  stored history, line for line).
- **Erased stays erased.** A message, episode, summary or session that a delete removed, and a deleted or
  redacted message under another id (the same words at the same time in the same session), is refused with 409
  (memory.lifecycle.tombstones remembers them without their text); a redacted message is stored with its
  replacement, so an older copy of it differs and is refused as above.
- **A conversation, or a restore.** An import with a write key carries sessions and messages (``message_vector``
  lines without embeddings may come along): the messages are stored as an add stores them (pending, embedded by
  epimem, their metadata checked as an add's, formed into episodes by epimem) and their processing state in the
  file is not used. Episode, summary and revision lines and embeddings are a *restore*, which takes an admin key
  for every group (or local mode, or the process itself): 403 otherwise.
- **In chunks.** Records are written ``CHUNK`` at a time, each chunk under the group's locks, which are released
  between chunks: adds to the group go on during a long import. Within a session a restore writes vectors before
  the log records of their messages (as an add does). An import stopped midway (a crash, a write of the same id
  that landed meanwhile) leaves whole records of the chunks it wrote; importing the file again adds the rest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from memory.embedding.embedder import Embedder
from memory.errors import ConflictError, ForbiddenError, InvalidInputError
from memory.lifecycle.export_format import ExportContents
from memory.lifecycle.revisions import Revision, RevisionLog
from memory.lifecycle.tombstones import ANY_SESSION, Erased, Key, Tombstones, said
from memory.models import Episode, Message, StoredMessage, check_client_messages
from memory.receipts import AddReceipt, ImportReceipt
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import RecordKind, VectorRecord, message_record_id
from memory.text import episode_embedding_text, message_line

CHUNK = 200  # records written under the group's locks at a time
READ_BATCH = 250  # ids read back at a time


class Adds(Protocol):
    """How messages are added (memory.ingest.intake.Intake): what a conversation import's chunks are."""

    def add_messages(self, group_id: str, session_id: str, messages: Sequence[Message]) -> AddReceipt: ...

    def index_unindexed(self, group_id: str, session_ids: Iterable[str]) -> int: ...


@dataclass(frozen=True)
class Gates:
    """What the memory service lends an import: its group's locks and what follows an add."""

    alone: Callable[[str, Sequence[str]], AbstractContextManager[Any]]  # the group exclusively, those sessions
    shared: Callable[[str], AbstractContextManager[Any]]  # the group shared (as an add holds it)
    added: Callable[[str, str, AddReceipt], None]  # what follows an add of the session (formation)


@dataclass
class _Item:
    """One record of a restore to write: a vector (with the text to embed) or a message or revisions."""

    record: VectorRecord | None = None
    text: str = ""
    embedding: list[float] | None = None
    message: StoredMessage | None = None
    revisions: tuple[str, list[Revision]] | None = None  # episode id, its history


@dataclass
class _Plan:
    sessions: list[Any] = field(default_factory=list)
    config: Any = None
    register: bool = False
    messages: dict[str, list[StoredMessage]] = field(default_factory=lambda: defaultdict(list))  # absent ones
    items: dict[str, list[_Item]] = field(default_factory=lambda: defaultdict(list))  # session -> restore items


def _told(record: Any) -> dict[str, Any]:
    """What a session or group record says: every field but when this group created and last updated it."""
    return record.model_dump(exclude={"created_at", "updated_at"})


def _regrouped(model: Any, group_id: str) -> Any:
    return model.model_copy(update={"group_id": group_id})


def _batches(values: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class Importer:
    def __init__(self, *, log: LogWriter, vectors: VectorWriter, embedder: Embedder, model_id: str, intake: Adds):
        self._log = log
        self._vectors = vectors
        self._embedder = embedder
        self._model_id = model_id
        self._intake = intake
        self._revisions = RevisionLog(log)
        self._tombstones = Tombstones(log)

    def run(self, parsed: ExportContents, target: str, *, restore: bool, gates: Gates) -> ImportReceipt:
        _allowed(parsed, restore)
        messages = [_regrouped(m, target) for m in parsed.messages]
        if not restore:
            check_client_messages([m.message for m in messages])
        episodes = [_regrouped(item, target) for _, item, _ in parsed.vectors if isinstance(item, Episode)]
        plan = self._plan(parsed, target, messages, episodes, restore=restore)
        reuse = self._reusable(parsed)
        with gates.alone(target, []):
            if plan.config is not None:
                self._log.put_group_config(plan.config)
            elif plan.register:
                self._log.register_group(target)
            for info in plan.sessions:
                self._log.put_session_info(info)
        for session_id in sorted(set(plan.messages) | set(plan.items)):
            if restore:
                self._restore_session(target, session_id, plan.items[session_id], reuse, gates)
            else:
                for chunk in _batches(plan.messages[session_id], CHUNK):
                    with gates.shared(target):
                        receipt = self._intake.add_messages(target, session_id, [s.message for s in chunk])
                    gates.added(target, session_id, receipt)
        if restore:  # pending messages of a file without their vectors: recalled from now on
            with gates.shared(target):
                self._intake.index_unindexed(target, parsed.session_ids)
        kinds = [kind for kind, _, _ in parsed.vectors]
        return ImportReceipt(
            group_id=target,
            source_group_id=parsed.group_id,
            source_model=str(parsed.header["embedding_model"].get("id", "")),
            reembedded=restore and not reuse and bool(parsed.vectors),
            sessions=len(parsed.sessions),
            messages=len(messages),
            episodes=kinds.count(RecordKind.EPISODE),
            summaries=kinds.count(RecordKind.SUMMARY),
            vectors=len(parsed.vectors),
        )

    # -- what the file may add ------------------------------------------------------------------------

    def _refuse_erased(
        self, target: str, sessions: list[Any], messages: list[StoredMessage], episodes: list[Episode]
    ) -> None:
        """Refuse the absent records (the group holds none of them) that a delete or a redaction erased."""
        keys: list[Key] = [(Erased.SESSION, s.session_id, s.session_id) for s in sessions]
        keys += [(Erased.MESSAGE, m.session_id, m.message.id) for m in messages]
        keys += [said(m.session_id, m.message) for m in messages]
        keys += [(Erased.EPISODE, ANY_SESSION, e.uuid) for e in episodes]
        erased = set(self._tombstones.erased(target, keys))
        ids = [key[2] for key in keys if key in erased and key[0] is not Erased.SAID]  # (a said key holds text)
        ids += [m.message.id for m in messages if said(m.session_id, m.message) in erased]
        if ids:
            raise ConflictError(
                "a delete or a redaction erased these ids, or these messages (the same words at the same time in the "
                "same session), from the group; an import never brings back what was erased",
                details={"ids": list(dict.fromkeys(ids))[:20]},
            )

    def _plan(
        self,
        parsed: ExportContents,
        target: str,
        messages: list[StoredMessage],
        episodes: list[Episode],
        *,
        restore: bool,
    ) -> _Plan:
        plan = _Plan()
        conflicts: list[str] = []
        config = _regrouped(parsed.config, target) if parsed.config is not None else None
        stored_config = self._log.get_group_config(target)
        if config is not None and stored_config is not None and _told(config) != _told(stored_config):
            conflicts.append(target)
        plan.config = config if stored_config is None else None
        plan.register = stored_config is None
        stored_sessions = {info.session_id: info for info in self._log.list_sessions(target)}
        for info in (_regrouped(s, target) for s in parsed.sessions):
            known = stored_sessions.get(info.session_id)
            if known is None:
                plan.sessions.append(info)
            elif _told(known) != _told(info):
                conflicts.append(info.session_id)
        by_session: dict[str, list[StoredMessage]] = defaultdict(list)
        for stored in messages:
            by_session[stored.session_id].append(stored)
        for session_id, items in by_session.items():
            held = self._held_messages(target, session_id, [s.message.id for s in items])
            for stored in items:
                kept = held.get(stored.message.id)
                if kept is None:
                    plan.messages[session_id].append(stored)
                elif (kept != stored) if restore else (kept.message != stored.message):
                    conflicts.append(stored.message.id)
        held_episodes: set[str] = set()
        if restore:
            conflicts += self._plan_restore(parsed, target, plan, episodes, held_episodes)
        absent = [stored for items in plan.messages.values() for stored in items]
        self._refuse_erased(target, plan.sessions, absent, [e for e in episodes if e.uuid not in held_episodes])
        if conflicts:
            raise ConflictError(
                "the group already holds these ids with other fields: an import adds what is absent and never "
                "changes what is stored (delete it first, or import into another group)",
                details={"ids": conflicts[:20]},
            )
        return plan

    def _plan_restore(
        self, parsed: ExportContents, target: str, plan: _Plan, episodes: list[Episode], held_ids: set[str]
    ) -> list[str]:
        """The vectors, messages and revisions a restore adds, by session; returns the conflicting ids and puts
        the ids of the file's episodes the group holds in ``held_ids``."""
        conflicts: list[str] = []
        held = {
            e.uuid: e for batch in _batches([e.uuid for e in episodes], READ_BATCH) for e in self._held(target, batch)
        }
        conflicts += [e.uuid for e in episodes if e.uuid in held and held[e.uuid] != e]
        held_ids |= set(held)
        by_key = {(m.session_id, m.message.id): m for m in parsed.messages}
        vector_ids = [message_record_id(*ref) for kind, ref, _ in parsed.vectors if isinstance(ref, tuple)]
        present = {
            record.id
            for batch in _batches(vector_ids, READ_BATCH)
            for record in self._vectors.records(target, ids=list(batch))
        }
        regrouped = iter(episodes)
        for _, item, embedding in parsed.vectors:
            if isinstance(item, Episode):
                episode = next(regrouped)
                if episode.uuid not in held:
                    record = VectorRecord.of_episode(episode)
                    plan.items[episode.session_id].append(_Item(record, episode_embedding_text(episode), embedding))
                continue
            stored = by_key.get(item)
            if stored is None:  # pending messages have vectors too (found before they are in an episode)
                raise InvalidInputError(f"a message vector names a message the file does not hold: {item[1][:100]!r}")
            stored = _regrouped(stored, target)
            record = VectorRecord.of_message(stored)
            if record.id not in present:
                plan.items[stored.session_id].append(_Item(record, message_line(stored.message), embedding))
        for session_id, absent in plan.messages.items():
            plan.items[session_id] += [_Item(message=stored) for stored in absent]
        new_episodes = {e.uuid for e in episodes if e.uuid not in held}
        histories: dict[tuple[str, str], list[Revision]] = defaultdict(list)
        for session_id, episode_id, revision in parsed.revisions:
            histories[(session_id, episode_id)].append(revision)
        for (session_id, episode_id), history in histories.items():
            history.sort(key=lambda r: r.revision)
            if [r.revision for r in history] != list(range(len(history))):
                raise InvalidInputError(f"the revisions of episode {episode_id[:100]!r} are not numbered 0, 1, 2...")
            if episode_id in new_episodes:
                plan.items[session_id].append(_Item(revisions=(episode_id, history)))
            elif episode_id in held:
                if self._revisions.stored(target, session_id, episode_id) != history:
                    conflicts.append(episode_id)
            else:
                raise InvalidInputError(f"revisions name an episode the file does not hold: {episode_id[:100]!r}")
        return conflicts

    def _held(self, target: str, ids: Sequence[str]) -> list[Episode]:
        return self._vectors.episodes(target, ids=list(ids))

    def _held_messages(self, target: str, session_id: str, ids: Sequence[str]) -> dict[str, StoredMessage]:
        found: dict[str, StoredMessage] = {}
        for batch in _batches(ids, READ_BATCH):
            found |= self._log.get_messages(target, session_id, list(batch))
        return found

    def _reusable(self, parsed: ExportContents) -> bool:
        """Whether the file's embeddings are the service's model's (else epimem embeds the text)."""
        source = str(parsed.header["embedding_model"].get("id", ""))
        embeddings = [embedding for _, _, embedding in parsed.vectors]
        dimension = self._embedder.dimension
        return (
            source == self._model_id
            and bool(embeddings)
            and all(e is not None and len(e) == dimension for e in embeddings)
        )

    # -- writing, chunk by chunk -----------------------------------------------------------------------------

    def _restore_session(self, target: str, session_id: str, items: list[_Item], reuse: bool, gates: Gates) -> None:
        for chunk in _batches(items, CHUNK):
            vectors = [item for item in chunk if item.record is not None]
            embedded = self._vectors_of(vectors, reuse)  # before the locks: the group waits for writes only
            with gates.alone(target, [session_id]):
                self._write_chunk(target, session_id, chunk, embedded)

    def _vectors_of(self, items: list[_Item], reuse: bool) -> list[VectorRecord]:
        if not items:
            return []
        if reuse:
            matrix = np.asarray([item.embedding for item in items], dtype=np.float32)
        else:
            matrix = self._embedder.embed_batch([item.text for item in items])
        return [item.record.with_embedding(vector) for item, vector in zip(items, matrix, strict=True) if item.record]

    def _write_chunk(self, target: str, session_id: str, chunk: Sequence[_Item], records: list[VectorRecord]) -> None:
        """One chunk, checked again under the locks (a write of the same id may have landed since the plan)."""
        messages = [item.message for item in chunk if item.message is not None]
        held = self._held_messages(target, session_id, [s.message.id for s in messages])
        changed = [s.message.id for s in messages if s.message.id in held and held[s.message.id] != s]
        episode_ids = [r.id for r in records if r.is_episode]
        held_episodes = {e.uuid for e in self._held(target, episode_ids)} if episode_ids else set()
        if changed or held_episodes:
            raise ConflictError(
                "these ids were written while the import ran; what it wrote before stays, and importing the file "
                "again adds the rest",
                details={"ids": (changed + sorted(held_episodes))[:20]},
            )
        message_records = [r.id for r in records if not r.is_episode]
        present = {r.id for r in self._vectors.records(target, ids=message_records)} if message_records else set()
        self._vectors.upsert(target, session_id, [r for r in records if r.id not in present], new=True)
        self._log.insert_messages(target, [s for s in messages if s.message.id not in held])
        for item in chunk:
            if item.revisions is not None:
                episode_id, history = item.revisions
                self._revisions.put(target, session_id, episode_id, history)


def _allowed(parsed: ExportContents, restore: bool) -> None:
    """A conversation (sessions and messages) for every writer; the rest of an export is a restore."""
    if restore:
        return
    for kind in ("episode", "summary", "revision", "embedding"):
        line = parsed.first_lines.get(kind)
        if line is not None:
            what = "an embedding" if kind == "embedding" else f"{kind} lines"
            raise ForbiddenError(
                f"line {line}: {what} restore what epimem made; that needs an admin key for every group ('*'). "
                "With this key, import sessions and messages: epimem embeds them and forms their episodes",
                details={"line": line, "kind": kind},
            )
