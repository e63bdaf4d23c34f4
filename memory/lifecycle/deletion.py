"""Deletion that leaves nothing behind, with repair of what was built from the deleted data.

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

Every delete but a group's remembers what it removed without its text (memory.lifecycle.tombstones: an
import does not bring it back). On embedded Chroma every delete ends by erasing the bytes it left in the
data folder (``StoreAdmin.erase``). Locking is the caller's (``memory.service``): these run alone on their group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory.errors import NotFoundError
from memory.ids import GROUP_SUMMARY_SESSION
from memory.lifecycle.reform import Reformer
from memory.lifecycle.revisions import RevisionKind
from memory.lifecycle.summaries import Summariser
from memory.lifecycle.tombstones import Tombstones, deleted_keys
from memory.models import Episode, Message
from memory.receipts import DeletionReceipt
from memory.store.protocols import Administration, LogWriter, VectorWriter
from memory.store.records import EPISODE_KINDS, RecordFilter, RecordKind, message_record_id

# Called with the receipt once the records are gone and before their bytes are erased (the audit trail
# forgets the removed ids there, so that the erasure takes its old entries too).
BeforeErase = Callable[[DeletionReceipt], None]


@dataclass(frozen=True)
class Rewrites:
    """What every change that removes or rewrites a group's stored records uses (deletes here, corrections and
    redactions in ``memory.lifecycle.editing``): the log, the vectors, the admin (erasure), and the summariser and
    reformer that repair what was made from them."""

    log: LogWriter
    vectors: VectorWriter
    admin: Administration
    summariser: Summariser
    reformer: Reformer


class Deleter:
    def __init__(self, parts: Rewrites) -> None:
        self._log, self._vectors, self._admin = parts.log, parts.vectors, parts.admin
        self._summariser, self._reformer = parts.summariser, parts.reformer
        self._tombstones = Tombstones(parts.log)

    # -- messages and episodes ---------------------------------------------------------------------

    def delete_message(
        self, group_id: str, session_id: str, message_id: str, *, before_erase: BeforeErase | None = None
    ) -> DeletionReceipt:
        doomed = self._log.get_messages(group_id, session_id, [message_id]).get(message_id)
        if doomed is None:
            raise NotFoundError("no such message in this session")
        return self.delete_messages(group_id, session_id, [message_id], before_erase=before_erase)

    def delete_messages(
        self,
        group_id: str,
        session_id: str,
        message_ids: Sequence[str],
        *,
        before_erase: BeforeErase | None = None,
        erase: bool = True,
    ) -> DeletionReceipt:
        """Messages of one session (ids not stored are skipped) as ``delete_message`` deletes one: each
        episode built from them is regenerated once from what remains, or deleted. ``erase`` false: the
        caller erases (one erasure after several sessions, memory.lifecycle.retention)."""
        stored = self._log.get_messages(group_id, session_id, list(message_ids))
        gone = [m for m in dict.fromkeys(message_ids) if m in stored]
        built_from = [e for e in self._session_episodes(group_id, session_id) if set(gone) & set(e.source_message_ids)]
        receipt = self._delete_messages(group_id, session_id, gone)
        changed: set[str] = set()
        for episode in built_from:
            remaining = [m for m in episode.source_message_ids if m not in stored]
            kept = self._log.get_messages(group_id, session_id, remaining)
            messages = sorted((kept[m].message for m in remaining if m in kept), key=lambda m: m.timestamp)
            if messages:
                reason = (
                    f"source message {gone[0]} deleted" if len(gone) == 1 else f"{len(gone)} source messages deleted"
                )
                self._reformer.reform(episode, messages, kind=RevisionKind.REFORMED, reason=reason)
                receipt.repaired.append(episode.uuid)
            else:
                self._delete_vectors(receipt, group_id, session_id, [episode.uuid])
                self._reformer.revisions.remove(group_id, session_id, [episode.uuid])
                receipt.episodes.append(episode.uuid)
            changed.add(episode.uuid)
        receipt.merge(self._repair_summaries(group_id, changed))
        self._tombstones.bury(group_id, deleted_keys(session_id, receipt, messages=[stored[m].message for m in gone]))
        if before_erase is not None:
            before_erase(receipt)
        if erase:
            self._admin.erase(group_id, [session_id, GROUP_SUMMARY_SESSION])
        return receipt

    def delete_episode(
        self, group_id: str, session_id: str, episode_id: str, *, before_erase: BeforeErase | None = None
    ) -> DeletionReceipt:
        selection = RecordFilter(session_ids=(session_id,), kinds=EPISODE_KINDS)
        found = self._vectors.episodes(group_id, ids=[episode_id], selection=selection)
        if not found:
            raise NotFoundError("no such episode in this session")
        episode = found[0]
        receipt = DeletionReceipt()
        said: list[Message] = []
        if episode.source_episode_ids:  # a summary: its sources stay
            self._summariser.unmark(group_id, episode)
            self._delete_vectors(receipt, group_id, session_id, [episode_id])
            receipt.summaries.append(episode_id)
        else:
            self._delete_vectors(receipt, group_id, session_id, [episode_id])
            self._reformer.revisions.remove(group_id, session_id, [episode_id])
            receipt.episodes.append(episode_id)
            stored = self._log.get_messages(group_id, session_id, list(episode.source_message_ids))
            said = [s.message for s in stored.values()]
            receipt.merge(self._delete_messages(group_id, session_id, list(stored)))
            receipt.merge(self._repair_summaries(group_id, {episode_id}))
        self._tombstones.bury(group_id, deleted_keys(session_id, receipt, messages=said))
        if before_erase is not None:
            before_erase(receipt)
        self._admin.erase(group_id, [session_id, GROUP_SUMMARY_SESSION])
        return receipt

    def _delete_messages(self, group_id: str, session_id: str, message_ids: list[str]) -> DeletionReceipt:
        """Messages from the log and their vectors from the partition and the index."""
        removed = self._log.delete_messages(group_id, session_id, message_ids)
        receipt = DeletionReceipt(log_records=len(removed), ids=list(removed), messages=list(message_ids))
        self._delete_vectors(receipt, group_id, session_id, [message_record_id(session_id, m) for m in message_ids])
        return receipt

    def _delete_vectors(self, receipt: DeletionReceipt, group_id: str, session_id: str, ids: Sequence[str]) -> None:
        count, removed = self._vectors.delete(group_id, session_id, ids)
        receipt.vectors += count
        receipt.ids += removed

    def _session_episodes(self, group_id: str, session_id: str) -> list[Episode]:
        selection = RecordFilter(session_ids=(session_id,), kinds=(RecordKind.EPISODE,))
        return self._vectors.episodes(group_id, selection=selection)

    def _repair_summaries(self, group_id: str, episode_ids: set[str]) -> DeletionReceipt:
        receipt = DeletionReceipt()
        if episode_ids:
            for summary in self._summariser.summaries_citing(group_id, episode_ids):
                receipt.merge(self._summariser.refresh(group_id, summary)[1])
        return receipt

    # -- sessions and groups ---------------------------------------------------------------------------

    def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        """Its collections and records; the group summaries citing it are rebuilt from what remains."""
        episodes = {e.uuid for e in self._session_episodes(group_id, session_id)}
        selection = RecordFilter(session_ids=(session_id,), kinds=(RecordKind.SUMMARY,))
        own_summaries = self._vectors.episodes(group_id, selection=selection)
        for summary in own_summaries:  # sources in other sessions stay, unmarked
            self._summariser.unmark(group_id, summary)
        stored = self._log.list_messages(group_id, session_id)
        receipt = self._admin.drop_session(group_id, session_id)
        receipt.messages += [s.message.id for s in stored]
        receipt.episodes += sorted(episodes)
        receipt.summaries += [s.uuid for s in own_summaries]
        receipt.merge(self._repair_summaries(group_id, episodes))
        said = [s.message for s in stored]
        self._tombstones.bury(group_id, deleted_keys(session_id, receipt, messages=said, session=True))
        return receipt

    def delete_group(self, group_id: str) -> DeletionReceipt:
        return self._admin.drop_group(group_id)

    def purge_lease_residue(self, group_id: str, session_ids: Sequence[str], *, group_deleted: bool) -> None:
        """Released formation leases of deleted sessions name them; remove those records (and a log
        that a lease release re-created for a deleted group); then erase what the delete left on disk."""
        for session_id in session_ids:
            released = [int(m["epoch"]) for m in self._log.lease_records(group_id, session_id) if m.get("released")]
            if released:
                self._log.delete_leases(group_id, session_id, released)
        if group_deleted:
            self._admin.drop_log_if_empty(group_id)
        self._admin.erase(group_id, [*session_ids, GROUP_SUMMARY_SESSION], group_deleted=group_deleted)
