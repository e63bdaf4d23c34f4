"""The operator's side of the memory service: retention policies and sweeps, backups read at one moment
per group, restores into an empty store. Mixed into ``memory.service.MemoryService`` (its locks, caches,
audit trail and events).

A backup's moment is per group: each group is read alone (its gate held exclusively and its sessions'
formation locks held, as a delete holds them), so it holds every change that returned before the read
and nothing of a change that began after; changes wait for the read, never for the rest of the file.
A server-wide backup is the groups' moments one after another, not one instant across groups. With
several epimem servers on one Chroma server, another server's write is seen by the group's version (its
stamp), and the group is read again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from memory.errors import ConflictError, InvalidInputError, NotFoundError, StoreUnavailableError
from memory.events import ChangeType, SessionOrder, change
from memory.lifecycle.audit import AuditAction, AuditTrail
from memory.lifecycle.backup import BackupSummary, BackupWriter, check_backup, read_parts
from memory.lifecycle.retention import Retention, RetentionPolicy, RetentionReceipt, StoredPolicy
from memory.receipts import DeletionReceipt
from memory.store.dump import PAGE, RawRecord
from memory.store.factory import Store
from memory.timeutil import utc_now

if TYPE_CHECKING:
    from memory.ingest.ingestor import Ingestor
    from memory.ingest.worker import FormationWorker

log = logging.getLogger("epimem.upkeep")

RETENTION_ACTOR = "retention"  # who sweeps in the background
READ_ATTEMPTS = 5  # a group that another server keeps writing is read this many times at most
GroupRead = list[tuple[str, dict[str, Any], list[RawRecord]]]


class RestoreReceipt(BaseModel):
    groups: list[str] = Field(description="groups restored")
    collections: int
    records: int
    backup_created_at: str
    sha256: str = Field(description="the backup's checksum (checked before anything was written)")
    inexact_vectors: int = Field(description="vectors that do not read back exactly as backed up (0 expected)")


class Upkeep:
    store: Store
    audit: AuditTrail
    events: SessionOrder
    retention: Retention
    _ingestor: Ingestor
    _worker: FormationWorker | None

    def _alone(self, group_id: str, session_ids: Iterable[str]) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _changed(self, group_id: str, receipt: DeletionReceipt | None = None) -> None:
        raise NotImplementedError

    def _session_ids(self, group_id: str) -> list[str]:
        raise NotImplementedError

    # -- retention ----------------------------------------------------------------------------------

    def put_retention(self, group_id: str, policy: RetentionPolicy, session_id: str | None = None) -> StoredPolicy:
        return self.retention.put(group_id, policy, session_id)

    def clear_retention(self, group_id: str, session_id: str | None = None) -> bool:
        return self.retention.clear(group_id, session_id)

    def retention_policies(self, group_id: str) -> tuple[StoredPolicy | None, dict[str, StoredPolicy]]:
        return self.retention.policies(group_id)

    def sweep_retention(
        self, group_id: str, *, now: datetime | None = None, dry_run: bool = False, actor: str = RETENTION_ACTOR
    ) -> RetentionReceipt:
        """Erase (or, ``dry_run``, list) what the group's policies say is too old at ``now``."""
        now = now or self.retention.clock()
        if dry_run:
            return self.retention.preview(group_id, now)

        def audit(done: RetentionReceipt) -> None:
            # Before the erasure, so that it takes the old versions of the entries that forget the erased ids;
            # the sweep's own entry is written after them: the receipt keeps its ids (ids only, the proof).
            self.audit.forget(group_id, {*done.messages, *done.episodes, *done.summaries})
            self.audit.record(group_id, AuditAction.RETENTION_SWEEP, actor, targets=done.sessions, receipt=done.ids())

        with self._alone(group_id, list(self.retention.effective(group_id))):
            receipt = self.retention.sweep(group_id, now, before_erase=audit)
        if receipt.sessions:
            self._changed(group_id)
            log.info("retention sweep: %s", receipt.counts)
            self.events.publish(
                change(
                    ChangeType.RETENTION_SWEPT,
                    group_id,
                    actor=actor,
                    messages=receipt.messages,
                    episodes=receipt.episodes,
                    summaries=receipt.summaries,
                    sessions=receipt.sessions,
                    repaired=receipt.repaired,
                )
            )
        return receipt

    def groups_with_retention(self) -> Iterator[str]:
        for group_id in self.store.log.list_groups():
            group, sessions = self.retention.policies(group_id)
            if group is not None or sessions:
                yield group_id

    # -- backups ------------------------------------------------------------------------------------

    def backup(
        self, out: IO[bytes], *, group_id: str | None = None, on_read: Callable[[str], None] | None = None
    ) -> BackupSummary:
        """Write a backup of every group (or one) into ``out``. ``on_read(group_id)`` runs while the group
        is still held, right after it was read: what it reads of the group is what the backup holds."""
        if group_id is not None and not self.store.log.group_exists(group_id):
            raise NotFoundError("group not found")
        groups = [group_id] if group_id is not None else self.store.log.list_groups()
        writer = BackupWriter(out, embedding_model=self.store.model_id, group_id=group_id)
        for group in groups:
            read_at, collections = self._read_group(group, on_read)
            writer.group(group, read_at, collections)
        return writer.close()

    def _read_group(self, group_id: str, on_read: Callable[[str], None] | None) -> tuple[str, GroupRead]:
        dump = self.store.dump
        for _ in range(READ_ATTEMPTS):
            with self._alone(group_id, self._session_ids(group_id)):
                before = dump.version(group_id)
                collections: GroupRead = []
                for name, metadata in dump.group_collections(group_id):
                    ids = dump.record_ids(name)
                    records = [
                        r for start in range(0, len(ids), PAGE) for r in dump.read(name, ids[start : start + PAGE])
                    ]
                    collections.append((name, metadata, records))
                if dump.version(group_id) == before:
                    if on_read is not None:
                        on_read(group_id)
                    return utc_now().isoformat(), collections
        raise StoreUnavailableError("the group kept changing while it was read for the backup", retry_after=1)

    def restore(self, path: Path) -> RestoreReceipt:
        """Write a backup into this store, which must hold nothing of what the backup holds (nothing at
        all for a server's backup). The whole file is checked before anything is written."""
        summary = check_backup(path)
        if summary.embedding_model != self.store.model_id:
            raise InvalidInputError(
                f"the backup was made with embedding model {summary.embedding_model!r}, this server uses "
                f"{self.store.model_id!r}: restore with the same model (EPIMEM_EMBEDDING_MODEL), then re-embed"
            )
        dump = self.store.dump
        if summary.scope == "server" and dump.holds_anything():
            raise ConflictError("a server's backup is restored only into an empty store (this one holds groups)")
        taken = [g for g in summary.groups if dump.holds_anything(g)]
        if taken:
            raise ConflictError(
                f"this store already holds {len(taken)} of the backup's groups", details={"groups": taken[:20]}
            )
        inexact = sum(dump.write(part.name, part.metadata, part.records) for part in read_parts(path))
        if inexact:
            log.warning("restore: %d vectors do not read back exactly as backed up", inexact)
        for group_id in summary.groups:
            dump.restored(group_id)
            self._changed(group_id)
        if self._worker is not None:  # pending messages close once they have been quiet, as after a restart
            restored = set(summary.groups)
            self._worker.watch(s for s in self._ingestor.unfinished_sessions() if s[0] in restored)
        return RestoreReceipt(
            groups=summary.groups,
            collections=summary.collections,
            records=summary.records,
            backup_created_at=summary.created_at,
            sha256=summary.sha256,
            inexact_vectors=inexact,
        )
