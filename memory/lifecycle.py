"""Deletion that leaves nothing behind, with repair of what was built from the deleted data, and
re-embedding after a model change.

Rules:

- deleting a message removes it from the log and its vector from the partition and the group
  index; the episode built from it is regenerated from the remaining messages with the same
  generator (same episode id, so links stay valid) or deleted if none remain;
- deleting an episode removes it and its source messages (everything it was made of);
- deleting a summary removes only the summary and clears ``summarised_by`` on its sources;
- whenever an episode changes or goes, the summaries citing it are rebuilt from the sources that
  remain (same summary id) or deleted when none remain;
- deleting a session or a group drops its collections; a group delete also sweeps every
  collection whose metadata names the group, and is idempotent.

Group deletion and concurrent writes (one process): writes to a group pass a ``GroupGate`` in
shared mode, lifecycle operations hold it exclusively. A message acknowledged before
``delete_group`` was called is gone afterwards; a message whose add starts after it returned is
kept; an add that overlaps the delete is either wholly gone or wholly kept — never a message
without its session record, nor vectors without their log.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from memory.embedding import Embedder
from memory.errors import NotFoundError
from memory.generation import EpisodeGenerator
from memory.ingestion import episode_embedding_text, message_embedding_text
from memory.models import Episode, Message, Segment
from memory.store import (
    REGISTRY,
    ChromaStore,
    DeletionReceipt,
    VectorRecord,
    episode_from_record,
    episode_metadata,
    index_name,
    log_name,
    message_record_id,
    partition_name,
)
from memory.summaries import GROUP_SUMMARY_SESSION, Summariser

log = logging.getLogger("epimem.lifecycle")

Progress = Callable[[int, int], None]
EMBED_BATCH = 256


class GroupGate:
    """A readers-writer lock per group: many writers of messages, or one lifecycle operation.

    Waiting exclusive holders block new shared holders, so a delete is never starved by a
    steady stream of adds. Not re-entrant: take it only at the facade's entry points.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._shared: dict[str, int] = defaultdict(int)
        self._exclusive: set[str] = set()
        self._waiting: dict[str, int] = defaultdict(int)

    @contextmanager
    def shared(self, group_id: str) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: group_id not in self._exclusive and not self._waiting[group_id])
            self._shared[group_id] += 1
        try:
            yield
        finally:
            with self._condition:
                self._shared[group_id] -= 1
                if not self._shared[group_id]:
                    del self._shared[group_id]
                self._condition.notify_all()

    @contextmanager
    def exclusive(self, group_id: str) -> Iterator[None]:
        with self._condition:
            self._waiting[group_id] += 1
            try:
                self._condition.wait_for(lambda: group_id not in self._exclusive and not self._shared.get(group_id))
            finally:
                self._waiting[group_id] -= 1
                if not self._waiting[group_id]:
                    del self._waiting[group_id]
            self._exclusive.add(group_id)
        try:
            yield
        finally:
            with self._condition:
                self._exclusive.discard(group_id)
                self._condition.notify_all()


@dataclass
class ReembedReport:
    model_id: str
    collections: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    vectors: int = 0
    groups: list[str] = field(default_factory=list)


class Lifecycle:
    def __init__(
        self, *, store: ChromaStore, embedder: Embedder, generator: EpisodeGenerator, summariser: Summariser
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._generator = generator
        self._summariser = summariser

    # -- messages and episodes ---------------------------------------------------------------------

    def delete_message(self, group_id: str, session_id: str, message_id: str) -> DeletionReceipt:
        if message_id not in self._store.get_messages(group_id, session_id, [message_id]):
            raise NotFoundError("no such message in this session")
        built_from = [e for e in self._session_episodes(group_id, session_id) if message_id in e.source_message_ids]
        receipt = self._store.delete_messages(group_id, session_id, [message_id])
        receipt.messages.append(message_id)
        changed: set[str] = set()
        for episode in built_from:
            remaining = [m for m in episode.source_message_ids if m != message_id]
            stored = self._store.get_messages(group_id, session_id, remaining)
            messages = sorted((stored[m].message for m in remaining if m in stored), key=lambda m: m.timestamp)
            if messages:
                self._regenerate(episode, messages)
                receipt.repaired.append(episode.uuid)
            else:
                receipt.merge(self._store.delete_vectors(group_id, session_id, [episode.uuid]))
                receipt.episodes.append(episode.uuid)
            changed.add(episode.uuid)
        receipt.merge(self._repair_summaries(group_id, changed))
        self.erase(group_id, [session_id])
        return receipt

    def delete_episode(self, group_id: str, session_id: str, episode_id: str) -> DeletionReceipt:
        records = self._store.get_vectors(group_id, session_id=session_id, ids=[episode_id])
        found = [r for r in records if r.metadata.get("kind") in ("episode", "summary")]
        if not found:
            raise NotFoundError("no such episode in this session")
        episode = episode_from_record(found[0].document, found[0].metadata)
        if episode.source_episode_ids:  # a summary: its sources stay
            self._summariser.unmark(group_id, episode)
            receipt = self._store.delete_vectors(group_id, session_id, [episode_id])
            receipt.summaries.append(episode_id)
            self.erase(group_id, [session_id])
            return receipt
        receipt = self._store.delete_vectors(group_id, session_id, [episode_id])
        receipt.episodes.append(episode_id)
        stored = self._store.get_messages(group_id, session_id, list(episode.source_message_ids))
        receipt.merge(self._store.delete_messages(group_id, session_id, list(stored)))
        receipt.messages += list(stored)
        receipt.merge(self._repair_summaries(group_id, {episode_id}))
        self.erase(group_id, [session_id])
        return receipt

    def _session_episodes(self, group_id: str, session_id: str) -> list[Episode]:
        records = self._store.get_vectors(group_id, session_id=session_id, where={"kind": "episode"})
        return [episode_from_record(r.document, r.metadata) for r in records]

    def _regenerate(self, episode: Episode, messages: Sequence[Message]) -> Episode:
        """The episode again from what remains, by the same generator; same id, markers kept."""
        segment = Segment(messages=tuple(messages), boundary_reason=episode.boundary_reason)
        made = self._generator.generate(
            segment, group_id=episode.group_id, session_id=episode.session_id, episode_id=episode.uuid
        )
        rebuilt = made.model_copy(
            update={"summarised_by": episode.summarised_by, "user_metadata": episode.user_metadata}
        )
        vector = self._embedder.embed_batch([episode_embedding_text(rebuilt)])[0]
        metadata = episode_metadata(rebuilt)
        self._store.upsert_vectors(
            episode.group_id, episode.session_id, [VectorRecord(rebuilt.uuid, rebuilt.content, metadata, vector)]
        )
        stale = sorted(set(episode_metadata(episode)) - set(metadata))
        self._store.remove_vector_metadata_keys(episode.group_id, episode.session_id, [rebuilt.uuid], stale)
        return rebuilt

    def _repair_summaries(self, group_id: str, episode_ids: set[str]) -> DeletionReceipt:
        receipt = DeletionReceipt()
        if not episode_ids:
            return receipt
        for summary in self._summariser.summaries_citing(group_id, episode_ids):
            receipt.merge(self._summariser.refresh(group_id, summary)[1])
        return receipt

    # -- sessions and groups ---------------------------------------------------------------------------

    def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        episodes = {e.uuid for e in self._session_episodes(group_id, session_id)}
        own = self._store.get_vectors(group_id, session_id=session_id, where={"kind": "summary"})
        own_summaries = [episode_from_record(r.document, r.metadata) for r in own]
        for summary in own_summaries:  # sources in other sessions stay, unmarked
            self._summariser.unmark(group_id, summary)
        messages = [s.message.id for s in self._store.list_messages(group_id, session_id)]
        receipt = self._store.delete_session(group_id, session_id)
        receipt.messages += messages
        receipt.episodes += sorted(episodes)
        receipt.summaries += [s.uuid for s in own_summaries]
        receipt.merge(self._repair_summaries(group_id, episodes))
        return receipt

    def delete_group(self, group_id: str) -> DeletionReceipt:
        return self._store.delete_group(group_id)

    def purge_lease_residue(self, group_id: str, session_ids: Sequence[str], *, group_deleted: bool) -> None:
        """Released formation leases of deleted sessions name them; remove those records (and a log
        that a lease release re-created for a deleted group); then erase what the delete left on disk."""
        for session_id in session_ids:
            released = [int(m["epoch"]) for m in self._store.lease_records(group_id, session_id) if m.get("released")]
            if released:
                self._store.delete_leases(group_id, session_id, released)
        if group_deleted:
            self._store.drop_log_if_empty(group_id)
        self.erase(group_id, session_ids, group_deleted=group_deleted)

    def erase(self, group_id: str, session_ids: Sequence[str], *, group_deleted: bool = False) -> None:
        """Erase the bytes a delete left in an embedded folder (memory.erasure): the collections of the
        group that had records deleted or rewritten are rebuilt, the folder scrubbed. Nothing with a
        Chroma server (``epimem erase-residue`` cleans a stopped server's folder)."""
        names = [REGISTRY] if group_deleted else [index_name(group_id), log_name(group_id)]
        names += [partition_name(group_id, s) for s in [*session_ids, GROUP_SUMMARY_SESSION]]
        self._store.connection.erase(names)

    # -- model change -----------------------------------------------------------------------------------

    def reembed(self, group_id: str | None = None, progress: Progress | None = None) -> ReembedReport:
        """Rebuild every vector of a group (or of all groups) from its stored text with the current
        model, and record that model on each rebuilt collection. Collections already built with
        the current model are skipped, so an interrupted run can simply be repeated."""
        report = ReembedReport(model_id=self._store.model_id)
        self._store.finish_rebuilds()
        todo: dict[str, list[str]] = defaultdict(list)
        for name, metadata in self._store.epimem_collections(group_id):
            if metadata.get("epimem") not in ("partition", "index"):
                continue
            if metadata.get("epimem_model") == self._store.model_id:
                report.skipped.append(name)
            else:
                todo[str(metadata["group_id"])].append(name)
        contents = {name: self._store.read_collection(name) for names in todo.values() for name in names}
        total = len({(g, r.id) for g, names in todo.items() for name in names for r in contents[name]})
        done = 0
        if progress is not None:
            progress(0, total)
        for group, names in sorted(todo.items()):
            vectors: dict[str, object] = {}
            pending = {r.id: r for name in names for r in contents[name]}
            texts = self._texts(group, list(pending.values()))
            ids = list(texts)
            for start in range(0, len(ids), EMBED_BATCH):
                batch = ids[start : start + EMBED_BATCH]
                for record_id, vector in zip(batch, self._embedder.embed_batch([texts[i] for i in batch]), strict=True):
                    vectors[record_id] = vector
                done += len(batch)
                if progress is not None:
                    progress(done, total)
            for name in names:
                rebuilt = [
                    VectorRecord(r.id, r.document, r.metadata, vectors[r.id])  # type: ignore[arg-type]
                    for r in contents[name]
                ]
                self._store.rebuild_collection(name, rebuilt)
                report.collections.append(name)
            report.vectors += len(ids)
            report.groups.append(group)
        return report

    def _texts(self, group_id: str, records: list[VectorRecord]) -> dict[str, str]:
        """What each record's vector is made from: the same text as at ingestion."""
        wanted: dict[str, list[str]] = defaultdict(list)
        for record in records:
            if record.metadata.get("kind") == "message":
                wanted[str(record.metadata["session_id"])].append(str(record.metadata["message_id"]))
        messages = {
            message_record_id(session_id, message_id): stored.message
            for session_id, ids in wanted.items()
            for message_id, stored in self._store.get_messages(group_id, session_id, ids).items()
        }
        texts = {}
        for record in records:
            if record.metadata.get("kind") == "message":
                message = messages.get(record.id)
                speaker = record.metadata.get("producer_id") or record.metadata.get("role", "user")
                texts[record.id] = message_embedding_text(message) if message else f"{speaker}: {record.document}"
            else:
                texts[record.id] = episode_embedding_text(episode_from_record(record.document, record.metadata))
        return texts
