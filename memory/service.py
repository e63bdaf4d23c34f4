"""The memory side of epimem as one service: every write, lifecycle operation and log read, each
under the right locks, with the caches of the read path told about every change.

Locks (one process): adds of a group hold the group's gate shared; lifecycle operations (deletes,
summaries, import, re-embedding) hold it exclusively and also take the formation locks of the
sessions they touch, in a fixed order (formation takes them the same way). A message acknowledged
before ``delete_group`` was called is gone afterwards; a message whose add starts after it returned
is kept; an add that overlaps the delete is either wholly gone or wholly kept — never a message
without its session record, nor vectors without their log.

Change notification: whatever rewrites or removes records of a group calls every listener
(``subscribe``) with the group id once it is done, so the read path's caches are dropped in one
place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.episodes.generation import GeneratorStats, ReportingGenerator
from memory.errors import NotFoundError
from memory.events import ChangeType, SessionOrder, change, redacted, removal
from memory.ingest.ingestor import Ingestor
from memory.ingest.timings import StageTimings
from memory.ingest.worker import FormationWorker
from memory.lifecycle.audit import LOCAL_ACTOR, AuditAction, AuditPage, AuditTrail
from memory.lifecycle.deletion import Deleter
from memory.lifecycle.editing import Editor, EpisodeCorrection, Redaction
from memory.lifecycle.export_format import ExportContents
from memory.lifecycle.importing import Gates, Importer
from memory.lifecycle.reembed import Progress, Reembedder, ReembedReport
from memory.lifecycle.retention import Retention
from memory.lifecycle.revisions import Revision
from memory.lifecycle.summaries import Summariser
from memory.lifecycle.transfer import Exporter
from memory.llm.stats import LLMCallStats, Reporting
from memory.locks import ReadersWriterLock
from memory.log_reads import LogReads
from memory.models import Episode, Message
from memory.readmodel.model import CacheStats
from memory.receipts import AddReceipt, DeletionReceipt, ImportReceipt, RedactionReceipt
from memory.store.factory import Store
from memory.upkeep import Upkeep

log = logging.getLogger("epimem")

Listener = Callable[[str], None]


@dataclass(frozen=True)
class ServiceStats:
    """One snapshot of what the service has done: what ``/metrics`` reads."""

    generator: GeneratorStats
    llm: dict[str, LLMCallStats]  # LLM-backed component ("generator", "segmenter") -> its counters
    ingest: StageTimings
    open_collections: int
    formation_queue: int | None  # None without a background worker
    formation_failures: int
    read_cache: CacheStats | None = None  # what the read model holds (memory.readmodel.model)


class MemoryService(LogReads, Upkeep):
    def __init__(
        self,
        *,
        store: Store,
        generator: ReportingGenerator,
        ingestor: Ingestor,
        summariser: Summariser,
        deleter: Deleter,
        reembedder: Reembedder,
        exporter: Exporter,
        importer: Importer,
        editor: Editor,
        retention: Retention,
        worker: FormationWorker | None = None,
        llm_components: Mapping[str, Reporting[LLMCallStats]] | None = None,
        read_cache: Callable[[], CacheStats] | None = None,
        closers: Sequence[Callable[[], None]] = (),
        events: SessionOrder | None = None,
    ) -> None:
        self.store = store
        self._generator = generator
        self._ingestor = ingestor
        self._summariser = summariser
        self._deleter = deleter
        self._reembedder = reembedder
        self._exporter = exporter
        self._importer = importer
        self._editor = editor
        self.retention = retention
        self.audit = AuditTrail(store.log)
        self._worker = worker
        self._llm_components = dict(llm_components or {})
        self._read_cache = read_cache  # the read model's figures (the service holds nothing of it)
        self._closers = list(closers)
        self.events = events or SessionOrder()  # every change (memory.events); the ingestor's formations too
        self._gate = ReadersWriterLock()
        self._listeners: list[tuple[str, Listener]] = []

    def subscribe(self, cache: str, listener: Listener) -> None:
        """Call ``listener(group_id)`` after every change of a group's records; ``cache`` names what
        it clears (deletion receipts list it)."""
        self._listeners.append((cache, listener))

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        for close in self._closers:
            close()

    # -- locks and change notification ----------------------------------------------------------------

    def _changed(self, group_id: str, receipt: DeletionReceipt | RedactionReceipt | None = None) -> None:
        for cache, listener in self._listeners:
            listener(group_id)
            if receipt is not None:
                receipt.caches.append(cache)
        if isinstance(receipt, DeletionReceipt) and receipt.collections:
            receipt.caches.append("collection-handles")

    def _announce(self, kind: ChangeType, group_id: str, actor: str, session_id: str | None, **ids: Any) -> None:
        self.events.publish(change(kind, group_id, actor=actor, session_id=session_id, **ids))

    @contextmanager
    def _alone(self, group_id: str, session_ids: Iterable[str]) -> Iterator[None]:
        """The group alone (adds wait) and the sessions' formation locks."""
        with self._gate.exclusive(group_id), self._ingestor.hold(group_id, session_ids):
            yield

    def _audited(
        self,
        group_id: str,
        action: AuditAction,
        actor: str,
        session_id: str,
        targets: list[str],
        *,
        gone: bool = False,
    ) -> Callable[[DeletionReceipt], None]:
        """What a delete does before its erasure: its entry in the audit trail, and every entry that
        names a removed id (and the session, when ``gone``) made to forget it (memory.lifecycle.audit)."""

        def audit(receipt: DeletionReceipt) -> None:
            self.audit.record(group_id, action, actor, session_id=session_id, targets=targets)
            removed = {*receipt.messages, *receipt.episodes, *receipt.summaries} | ({session_id} if gone else set())
            self.audit.forget(group_id, removed)

        return audit

    def _session_ids(self, group_id: str) -> list[str]:
        return [info.session_id for info in self.store.log.list_sessions(group_id)]

    # -- writes ----------------------------------------------------------------------------------------

    def add_messages(
        self, group_id: str, session_id: str, messages: Sequence[Message], *, actor: str = LOCAL_ACTOR
    ) -> AddReceipt:
        with self.events.adding(group_id, [session_id]):  # announced before a formation of them is
            with self._gate.shared(group_id):
                receipt = self._ingestor.intake.add_messages(group_id, session_id, messages)
            if receipt.accepted:
                self.audit.record(group_id, AuditAction.ADD, actor, session_id=session_id, targets=receipt.accepted)
                self._announce(ChangeType.MESSAGES_ADDED, group_id, actor, session_id, messages=receipt.accepted)
        self._added(group_id, session_id, receipt)
        return receipt

    def _added(self, group_id: str, session_id: str, receipt: AddReceipt) -> None:
        """What follows messages added to a session: its idle timer, and formation once enough are pending."""
        if self._worker is not None and receipt.accepted:
            self._worker.touch(group_id, session_id)  # the session closes once it goes quiet
        if self._ingestor.needs_formation(receipt):
            if self._worker is not None:
                self._worker.submit(group_id, session_id)
            else:
                self._ingestor.form_closed(group_id, session_id)

    def flush(self, group_id: str, session_id: str, *, actor: str = LOCAL_ACTOR) -> list[Episode]:
        """The session's pending messages formed now (a boundary of kind ``flush``), audited."""
        formed = self._ingestor.flush(group_id, session_id)
        if formed:
            targets = [e.uuid for e in formed]
            self.audit.record(group_id, AuditAction.FLUSH, actor, session_id=session_id, targets=targets)
        return formed

    def flush_group(self, group_id: str, *, actor: str = LOCAL_ACTOR) -> list[Episode]:
        formed = self._ingestor.form([(group_id, s) for s in self._session_ids(group_id)], close_tail=True)
        if formed:
            self.audit.record(group_id, AuditAction.FLUSH, actor, targets=[e.uuid for e in formed])
        return formed

    def ingest_sessions(self, group_id: str, sessions: Mapping[str, Sequence[Message]]) -> list[Episode]:
        """Several sessions of one group at once: their messages stored in one write while they are
        embedded in one call, then formed in one batch."""
        with self.events.adding(group_id, sessions), self._gate.shared(group_id):
            embedded = self._ingestor.intake.store_and_embed(group_id, sessions)
            for session_id, added in sessions.items():
                ids = [m.id for m in added]
                self._announce(ChangeType.MESSAGES_ADDED, group_id, LOCAL_ACTOR, session_id, messages=ids)
        return self._ingestor.form([(group_id, s) for s in sessions], close_tail=True, embedded=embedded)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._worker.wait_idle(timeout) if self._worker is not None else True

    def recover(self) -> list[Episode]:
        """Finish what a crash interrupted: summary runs are rolled back, episodes are formed."""
        for group_id in self.store.log.list_groups():
            if self._summariser.rollback_unfinished(group_id):
                self._changed(group_id)
        formed = self._ingestor.recover()
        if self._worker is not None:  # what is still pending closes once it has been quiet for long enough
            self._worker.watch(self._ingestor.unfinished_sessions())
        return formed

    # -- lifecycle ----------------------------------------------------------------------------------------

    def delete_message(
        self, group_id: str, session_id: str, message_id: str, *, actor: str = LOCAL_ACTOR
    ) -> DeletionReceipt:
        audited = self._audited(group_id, AuditAction.DELETE_MESSAGE, actor, session_id, [message_id])
        with self._alone(group_id, [session_id]):
            receipt = self._deleter.delete_message(group_id, session_id, message_id, before_erase=audited)
        self._changed(group_id, receipt)
        self.events.publish(removal(ChangeType.MESSAGE_DELETED, group_id, session_id, receipt, actor))
        return receipt

    def delete_episode(
        self, group_id: str, session_id: str, episode_id: str, *, actor: str = LOCAL_ACTOR
    ) -> DeletionReceipt:
        audited = self._audited(group_id, AuditAction.DELETE_EPISODE, actor, session_id, [episode_id])
        with self._alone(group_id, [session_id]):
            receipt = self._deleter.delete_episode(group_id, session_id, episode_id, before_erase=audited)
        self._changed(group_id, receipt)
        self.events.publish(removal(ChangeType.EPISODE_DELETED, group_id, session_id, receipt, actor))
        return receipt

    def delete_session(self, group_id: str, session_id: str, *, actor: str = LOCAL_ACTOR) -> DeletionReceipt:
        with self._gate.exclusive(group_id):
            with self._ingestor.hold(group_id, [session_id]):
                receipt = self._deleter.delete_session(group_id, session_id)
            audited = self._audited(group_id, AuditAction.DELETE_SESSION, actor, session_id, [session_id], gone=True)
            audited(receipt)
            self._deleter.purge_lease_residue(group_id, [session_id], group_deleted=False)
        self._changed(group_id, receipt)
        self.events.publish(removal(ChangeType.SESSION_DELETED, group_id, session_id, receipt, actor))
        return receipt

    def delete_group(self, group_id: str, *, actor: str = LOCAL_ACTOR) -> DeletionReceipt:
        with self._gate.exclusive(group_id):
            sessions = self._session_ids(group_id)
            with self._ingestor.hold(group_id, sessions):
                receipt = self._deleter.delete_group(group_id)
            self._deleter.purge_lease_residue(group_id, sessions, group_deleted=True)
        log.info("deleted a group with %d sessions", len(sessions))
        self._changed(group_id, receipt)
        self.events.publish(removal(ChangeType.GROUP_DELETED, group_id, None, receipt, actor))
        return receipt

    def generate_summaries(
        self,
        group_id: str,
        session_id: str | None,
        start: datetime,
        end: datetime,
        max_units: int,
        *,
        actor: str = LOCAL_ACTOR,
    ) -> list[Episode]:
        with self._gate.exclusive(group_id):
            sessions = [session_id] if session_id else self._session_ids(group_id)
            with self._ingestor.hold(group_id, sessions):
                self._summariser.rollback_unfinished(group_id)
                planned = self._summariser.plan(group_id, session_id, start, end, max_units)
                summaries = self._summariser.write(group_id, planned)
        self._changed(group_id)
        if summaries:
            targets = [e.uuid for e in summaries]
            self.audit.record(group_id, AuditAction.SUMMARISE, actor, session_id=session_id, targets=targets)
            self._announce(ChangeType.SUMMARIES_CREATED, group_id, actor, session_id, summaries=targets)
        return summaries

    def export_group(self, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
        if not self.group_exists(group_id):
            raise NotFoundError("group not found")
        return self._exporter.export(group_id, include_embeddings=include_embeddings)

    def import_group(
        self, contents: ExportContents, *, group_id: str | None = None, actor: str = LOCAL_ACTOR, restore: bool = True
    ) -> ImportReceipt:
        """Add what the file holds and the group lacks; ``restore``: it may carry what epimem made (importing)."""
        target = group_id or contents.group_id
        gates = Gates(alone=self._alone, shared=self._gate.shared, added=self._added)
        receipt = self._importer.run(contents, target, restore=restore, gates=gates)
        self._changed(target)
        self.audit.record(target, AuditAction.IMPORT, actor, targets=contents.session_ids)
        self._announce(ChangeType.GROUP_IMPORTED, target, actor, None, sessions=contents.session_ids)
        return receipt

    def reembed(
        self, group_id: str | None = None, progress: Progress | None = None, *, actor: str = LOCAL_ACTOR
    ) -> ReembedReport:
        groups = [group_id] if group_id is not None else self._reembedder.groups()
        with self._gate.exclusive_all(groups):
            report = self._reembedder.reembed(group_id, progress)
        for group in groups:
            self._changed(group)
            if group in report.groups:
                self.audit.record(group, AuditAction.REEMBED, actor)
        return report

    # -- corrections ----------------------------------------------------------------------------------------

    def correct_episode(
        self,
        group_id: str,
        session_id: str,
        episode_id: str,
        correction: EpisodeCorrection,
        *,
        actor: str = LOCAL_ACTOR,
    ) -> Episode:
        with self._alone(group_id, [session_id]):
            episode = self._editor.correct(group_id, session_id, episode_id, correction, actor=actor)
        self._changed(group_id)
        self.audit.record(group_id, AuditAction.CORRECT, actor, session_id=session_id, targets=[episode_id])
        self._announce(ChangeType.EPISODE_CORRECTED, group_id, actor, session_id, episodes=[episode_id])
        return episode

    def revisions(self, group_id: str, session_id: str, episode_id: str) -> list[Revision]:
        """The episode's history, oldest first (revision 0: as generated)."""
        return self._editor.revisions.history(self._editor.episode(group_id, session_id, episode_id))

    def redact_message(
        self, group_id: str, session_id: str, message_id: str, redaction: Redaction, *, actor: str = LOCAL_ACTOR
    ) -> RedactionReceipt:
        with self._alone(group_id, [session_id]):
            receipt = self._editor.redact(group_id, session_id, message_id, redaction)
        if receipt.redacted:
            self._changed(group_id, receipt)
            targets = [message_id, *receipt.episodes]
            self.audit.record(group_id, AuditAction.REDACT, actor, session_id=session_id, targets=targets)
            self.events.publish(redacted(group_id, session_id, receipt, actor))
        return receipt

    def audit_page(self, group_id: str, *, limit: int = 50, cursor: str | None = None) -> AuditPage:
        if not self.group_exists(group_id):
            raise NotFoundError("group not found")
        return self.audit.page(group_id, limit=limit, cursor=cursor)

    # -- figures ------------------------------------------------------------------------------------------

    def stats(self) -> ServiceStats:
        worker = self._worker
        return ServiceStats(
            generator=self._generator.stats(),
            llm={name: component.stats() for name, component in self._llm_components.items()},
            ingest=self._ingestor.timings.snapshot(),
            open_collections=self.store.admin.open_collections,
            formation_queue=len(worker.pending()) if worker is not None else None,
            formation_failures=worker.failures if worker is not None else 0,
            read_cache=self._read_cache() if self._read_cache is not None else None,
        )
