"""Retention: a group (or one of its sessions) keeps messages for at most ``max_age_days``, and what was
made from them goes with them.

A policy ages messages by their own timestamps (``by="timestamp"``, the default) or by when epimem
received them (``by="arrival"``). A session's own policy replaces the group's for that session. A sweep
erases every message past its policy's cutoff exactly as deleting it would (memory.lifecycle.deletion):
an episode all of whose messages expired is removed, one partly expired is formed again from the
messages that remain (same id), summaries citing either are rebuilt or removed; then, on embedded
Chroma, one erasure for the whole sweep scrubs the data folder. A dry run plans the same sweep and
changes nothing.

Policies are records of the group's log (kind ``retention``): a group delete takes them, a session
delete takes the session's, a backup carries them. Locking and the audit entry are the caller's
(``memory.upkeep``). Time comes from the injected ``clock``, so tests never wait.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from memory.ids import GROUP_SUMMARY_SESSION
from memory.lifecycle.deletion import Deleter
from memory.lifecycle.summaries import Summariser
from memory.models import Episode, UtcDatetime
from memory.receipts import DeletionReceipt
from memory.store.protocols import Administration, LogWriter, VectorReader
from memory.store.records import RecordFilter, RecordKind
from memory.timeutil import utc_now

KIND = "retention"
GROUP_RECORD = "retention-group"
MAX_AGE_DAYS = 36_600  # a hundred years
Clock = Callable[[], datetime]
RECEIPT_KINDS = ("sessions", "messages", "episodes", "summaries", "repaired")


class AgeBasis(StrEnum):
    TIMESTAMP = "timestamp"  # the message's own time (when it was said)
    ARRIVAL = "arrival"  # when epimem received it


class RetentionPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_age_days: float = Field(gt=0, le=MAX_AGE_DAYS, description="messages older than this are erased")
    by: AgeBasis = Field(default=AgeBasis.TIMESTAMP, description="age by the messages' timestamps, or by arrival")

    def cutoff(self, now: datetime) -> datetime:
        return now - timedelta(days=self.max_age_days)


class StoredPolicy(RetentionPolicy):
    session_id: str | None = Field(default=None, description="None: the group's policy")
    updated_at: UtcDatetime


class RetentionReceipt(BaseModel):
    """What a sweep erased (or, in a dry run, would erase): ids and counts, never content."""

    group_id: str
    dry_run: bool
    swept_at: UtcDatetime = Field(description="the moment the policies' ages were measured from")
    sessions: list[str] = Field(default_factory=list, description="sessions that lost messages")
    messages: list[str] = Field(default_factory=list, description="messages erased")
    episodes: list[str] = Field(default_factory=list, description="episodes erased (every source message expired)")
    summaries: list[str] = Field(default_factory=list, description="summaries erased")
    repaired: list[str] = Field(default_factory=list, description="episodes and summaries rebuilt from what remains")
    counts: dict[str, int] = Field(default_factory=dict, description="how many of each")

    def counted(self) -> RetentionReceipt:
        return self.model_copy(update={"counts": {name: len(ids) for name, ids in self.ids().items()}})

    def ids(self) -> dict[str, list[str]]:
        """Kind -> ids, as the counts and the audit trail name them."""
        return {name: getattr(self, name) for name in RECEIPT_KINDS}


def _session_record(session_id: str) -> str:
    return f"retention-s-{hashlib.sha256(session_id.encode()).hexdigest()[:32]}"


class Retention:
    def __init__(
        self,
        *,
        log: LogWriter,
        vectors: VectorReader,
        admin: Administration,
        deleter: Deleter,
        summariser: Summariser,
        clock: Clock = utc_now,
    ) -> None:
        self._log = log
        self._vectors = vectors
        self._admin = admin
        self._deleter = deleter
        self._summariser = summariser
        self.clock = clock

    # -- policies ------------------------------------------------------------------------------------

    def put(self, group_id: str, policy: RetentionPolicy, session_id: str | None = None) -> StoredPolicy:
        stored = StoredPolicy(**policy.model_dump(), session_id=session_id, updated_at=self.clock())
        metadata = {"kind": KIND} if session_id is None else {"kind": KIND, "session_id": session_id}
        record = GROUP_RECORD if session_id is None else _session_record(session_id)
        self._log.register_group(group_id)  # a policy may come before the group's first message
        self._log.put_record(group_id, record, stored.model_dump_json(), metadata)
        return stored

    def clear(self, group_id: str, session_id: str | None = None) -> bool:
        record = GROUP_RECORD if session_id is None else _session_record(session_id)
        return self._log.delete_records(group_id, [record]) > 0

    def policies(self, group_id: str) -> tuple[StoredPolicy | None, dict[str, StoredPolicy]]:
        """The group's policy and the sessions' own ones."""
        group: StoredPolicy | None = None
        sessions: dict[str, StoredPolicy] = {}
        for _, document, _ in self._log.records(group_id, KIND):
            policy = StoredPolicy.model_validate_json(document)
            if policy.session_id is None:
                group = policy
            else:
                sessions[policy.session_id] = policy
        return group, sessions

    def effective(self, group_id: str) -> dict[str, RetentionPolicy]:
        """Each session of the group that a policy covers -> the policy that applies to it."""
        group, own = self.policies(group_id)
        if group is None and not own:
            return {}
        sessions = [info.session_id for info in self._log.list_sessions(group_id)]
        chosen = {session_id: own.get(session_id, group) for session_id in sessions}
        return {session_id: policy for session_id, policy in chosen.items() if policy is not None}

    # -- sweeps --------------------------------------------------------------------------------------

    def expired(self, group_id: str, now: datetime) -> dict[str, list[str]]:
        """Session -> ids of its messages past the cutoff of the policy that covers it."""
        found: dict[str, list[str]] = {}
        for session_id, policy in self.effective(group_id).items():
            cutoff = policy.cutoff(now)
            stored = self._log.list_messages(group_id, session_id)
            by_arrival = policy.by is AgeBasis.ARRIVAL
            ids = [s.message.id for s in stored if (s.received_at if by_arrival else s.message.timestamp) < cutoff]
            if ids:
                found[session_id] = ids
        return found

    def preview(self, group_id: str, now: datetime) -> RetentionReceipt:
        """What a sweep at ``now`` would erase and rebuild, changing nothing."""
        receipt = RetentionReceipt(group_id=group_id, dry_run=True, swept_at=now)
        changed: set[str] = set()
        removed: set[str] = set()
        for session_id, message_ids in self.expired(group_id, now).items():
            receipt.sessions.append(session_id)
            receipt.messages += message_ids
            expired = set(message_ids)
            for episode in self._episodes(group_id, session_id):
                if expired.isdisjoint(episode.source_message_ids):
                    continue
                changed.add(episode.uuid)
                if expired.issuperset(episode.source_message_ids):
                    receipt.episodes.append(episode.uuid)
                    removed.add(episode.uuid)
                else:
                    receipt.repaired.append(episode.uuid)
        for summary in self._summariser.summaries_citing(group_id, changed) if changed else []:
            if removed.issuperset(summary.source_episode_ids):
                receipt.summaries.append(summary.uuid)
            else:
                receipt.repaired.append(summary.uuid)
        return receipt.counted()

    def sweep(
        self, group_id: str, now: datetime, *, before_erase: Callable[[RetentionReceipt], None] | None = None
    ) -> RetentionReceipt:
        """Erase what is past its policy at ``now`` (the caller holds the group alone); ``before_erase`` gets
        the receipt once the records are removed, before the data folder is scrubbed."""
        receipt = RetentionReceipt(group_id=group_id, dry_run=False, swept_at=now)
        removed = DeletionReceipt()
        for session_id, message_ids in self.expired(group_id, now).items():
            done = self._deleter.delete_messages(group_id, session_id, message_ids, erase=False)
            receipt.sessions.append(session_id)
            removed.merge(done)
        if not receipt.sessions:
            return receipt.counted()
        repaired = [i for i in dict.fromkeys(removed.repaired) if i not in set(removed.episodes + removed.summaries)]
        update = {
            "messages": removed.messages,
            "episodes": removed.episodes,
            "summaries": removed.summaries,
            "repaired": repaired,
        }
        swept = receipt.model_copy(update=update).counted()
        if before_erase is not None:
            before_erase(swept)
        self._admin.erase(group_id, [*receipt.sessions, GROUP_SUMMARY_SESSION])
        return swept

    def covered_sessions(self, group_id: str, sessions: Sequence[str] | None = None) -> list[str]:
        """The sessions a policy covers (what a sweep must hold)."""
        covered = self.effective(group_id)
        return [s for s in (sessions if sessions is not None else covered) if s in covered]

    def _episodes(self, group_id: str, session_id: str) -> list[Episode]:
        selection = RecordFilter(session_ids=(session_id,), kinds=(RecordKind.EPISODE,))
        return self._vectors.episodes(group_id, selection=selection)
