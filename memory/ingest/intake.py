"""Messages in: stored durably, embedded and indexed at once, so that every acknowledged message is
recalled before it belongs to an episode (memory.ingest.ingestor forms the episodes)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from memory.embedding.embedder import Embedder
from memory.errors import ConflictError
from memory.ingest.batches import same_message, unique_ids
from memory.ingest.coordination import Coordinator
from memory.ingest.timings import StageTimings
from memory.ingest.writer import OrderedWriter
from memory.locks import SessionLocks
from memory.models import Message, MessageState, SessionInfo, StoredMessage
from memory.receipts import AddReceipt
from memory.store.paging import WRITE_BATCH
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import RecordFilter, RecordKind, VectorRecord, message_record_id
from memory.text import message_line
from memory.timeutil import utc_now

# (group, session, message id) -> (the text embedded, its vector): vectors computed before formation
Embedded = dict[tuple[str, str, str], tuple[str, np.ndarray]]


class Intake:
    def __init__(
        self,
        *,
        log: LogWriter,
        vectors: VectorWriter,
        embedder: Embedder,
        coordinator: Coordinator,
        timings: StageTimings,
    ) -> None:
        self._log = log
        self._vectors = vectors
        self._embedder = embedder
        self._coordinator = coordinator
        self.timings = timings
        # Adds only serialise among themselves, so a slow formation (LLM) never delays an add.
        self._add_locks = SessionLocks()

    def add_messages(self, group_id: str, session_id: str, messages: Sequence[Message]) -> AddReceipt:
        """Store messages durably and make them recallable at once. Idempotent by id: the same id and
        content again is a duplicate, the same id with other content is a conflict (and nothing of
        the batch is written).

        Each new message's vector record (under its session's open episode) is written before its
        log record: formation takes its messages from the log, so it never forms a message whose
        open vector could still land after (and over) the one formation writes."""
        ids = unique_ids(messages)
        with self._add_locks.hold([(group_id, session_id)]), self.timings.stage("store_messages"):
            existing = self._log.get_messages(group_id, session_id, ids)
            conflicts = [m.id for m in messages if m.id in existing and not same_message(existing[m.id].message, m)]
            if conflicts:
                raise ConflictError("message ids already exist with different content", details={"ids": conflicts[:20]})
            if self._log.get_session_info(group_id, session_id) is None:
                self._log.put_session_info(SessionInfo(group_id=group_id, session_id=session_id))
            base = time.time_ns()
            received = utc_now()
            new = [
                StoredMessage(
                    group_id=group_id, session_id=session_id, message=m, received_at=received, sequence=base + i
                )
                for i, m in enumerate(m for m in messages if m.id not in existing)
            ]
            self._index(group_id, session_id, new)
            # Insert, never overwrite: a message that a formation already moved on stays as it is.
            self._log.insert_messages(group_id, new)
            if new and self._coordinator.distributed:
                # Another server may have inserted the same id first, with other content.
                stored, lost = self._lost(group_id, session_id, new)
                if lost:
                    self._index(group_id, session_id, [stored[i] for i in lost if i in stored])  # theirs, not ours
                    raise ConflictError(
                        "a concurrent request stored these message ids first, with different content",
                        details={"ids": lost[:20]},
                    )
            pending = self._log.count_messages(
                group_id, session_id, states=[MessageState.PENDING], single_writer=not self._coordinator.distributed
            )
        return AddReceipt(
            accepted=[s.message.id for s in new],
            duplicates=[m.id for m in messages if m.id in existing],
            pending=pending,
        )

    def _lost(
        self, group_id: str, session_id: str, written: Sequence[StoredMessage]
    ) -> tuple[dict[str, StoredMessage], list[str]]:
        """What the log holds of messages just inserted, and the ids another server stored first with other
        content (an insert never overwrites)."""
        stored = self._log.get_messages(group_id, session_id, [s.message.id for s in written])
        lost = [
            s.message.id
            for s in written
            if s.message.id not in stored or not same_message(stored[s.message.id].message, s.message)
        ]
        return stored, lost

    def _index(self, group_id: str, session_id: str, stored: Sequence[StoredMessage]) -> None:
        """Embed messages and write their vector records (partition and group index): what makes a
        message found by search and context before it belongs to an episode."""
        if not stored:
            return
        with self.timings.stage("embedding"):
            vectors = self._embedder.embed_batch([message_line(s.message) for s in stored])
        records = [VectorRecord.of_message(s, vector) for s, vector in zip(stored, vectors, strict=True)]
        for start in range(0, len(records), WRITE_BATCH):
            self._vectors.upsert(group_id, session_id, records[start : start + WRITE_BATCH], new=True)

    def index_unindexed(self, group_id: str, session_ids: Iterable[str]) -> int:
        """Write the vector records that pending messages lack (stored by an import of a file without
        them, or by a version before live memory): they are recalled from then on. Returns how many."""
        written = 0
        for session_id in session_ids:
            with self._add_locks.hold([(group_id, session_id)]):
                pending = self._log.list_messages(group_id, session_id, states=[MessageState.PENDING])
                known = self.stored_vectors(group_id, session_id, [s.message for s in pending])
                missing = [s for s in pending if s.message.id not in known]
                self._index(group_id, session_id, missing)
                written += len(missing)
        return written

    def stored_vectors(self, group_id: str, session_id: str, messages: Sequence[Message]) -> dict[str, np.ndarray]:
        """Message id -> the vector its record holds (written when it was added)."""
        if not messages:
            return {}
        by_record = {message_record_id(session_id, m.id): m.id for m in messages}
        selection = RecordFilter(session_ids=(session_id,), kinds=(RecordKind.MESSAGE,))
        records = self._vectors.records(group_id, ids=list(by_record), selection=selection, embeddings=True)
        return {by_record[r.id]: r.embedding for r in records if r.embedding is not None and r.id in by_record}

    def add_sessions(self, group_id: str, sessions: Mapping[str, Sequence[Message]]) -> None:
        """``add_messages`` for several sessions of one group at once: one read of the group's
        sessions, one write of the new session records, one write of every new message."""
        for messages in sessions.values():
            unique_ids(messages)
        keys = [(group_id, session_id) for session_id in sessions]
        with self._add_locks.hold(keys), self.timings.stage("store_messages"):
            known = {info.session_id for info in self._log.list_sessions(group_id)}
            new: list[StoredMessage] = []
            base = time.time_ns()
            received = utc_now()
            for session_id, messages in sessions.items():
                existing = self._log.get_messages(group_id, session_id, [m.id for m in messages])
                conflicts = [m.id for m in messages if m.id in existing and not same_message(existing[m.id].message, m)]
                if conflicts:
                    raise ConflictError(
                        "message ids already exist with different content", details={"ids": conflicts[:20]}
                    )
                new += [
                    StoredMessage(
                        group_id=group_id,
                        session_id=session_id,
                        message=m,
                        received_at=received,
                        sequence=base + len(new) + i,
                    )
                    for i, m in enumerate(m for m in messages if m.id not in existing)
                ]
            self._log.put_session_infos(
                group_id, [SessionInfo(group_id=group_id, session_id=s) for s in sessions if s not in known]
            )
            for start in range(0, len(new), WRITE_BATCH):
                self._log.insert_messages(group_id, new[start : start + WRITE_BATCH])
            if new and self._coordinator.distributed:
                by_session: dict[str, list[StoredMessage]] = defaultdict(list)
                for stored in new:
                    by_session[stored.session_id].append(stored)
                for session_id, items in by_session.items():
                    _found, lost = self._lost(group_id, session_id, items)
                    if lost:
                        raise ConflictError(
                            "a concurrent request stored these message ids first, with different content",
                            details={"ids": lost[:20]},
                        )

    def store_and_embed(self, group_id: str, sessions: Mapping[str, Sequence[Message]]) -> Embedded:
        """Store several sessions' messages (``add_sessions``) while their vectors are computed (what
        ``form`` would embed for them, given to it as ``embedded``): one embedding call per session,
        the batches ``form`` itself makes, so the vectors are the same to the last bit."""
        found: Embedded = {}
        with OrderedWriter("epimem-add") as writer:
            writer.submit(lambda: self.add_sessions(group_id, sessions))
            for session_id, given in sessions.items():
                messages = sorted(given, key=lambda m: m.timestamp)  # the order ``form`` reads them back in
                texts = [message_line(m) for m in messages]
                with self.timings.stage("embedding"):
                    vectors = self._embedder.embed_batch(texts)
                for message, text, vector in zip(messages, texts, vectors, strict=True):
                    found[(group_id, session_id, message.id)] = (text, vector)
        return found
