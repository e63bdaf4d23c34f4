"""The durable records of a group, in its log collection (and the registry of groups): messages
verbatim with their processing state, SessionInfo and GroupConfiguration, summary journals and
formation leases."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

from memory.models import GroupConfiguration, MessageState, SessionInfo, StoredMessage
from memory.store import codec, versions
from memory.store.calls import StorePart, store_call
from memory.store.changes import Change
from memory.store.collections import Collections
from memory.store.paging import PAGE
from memory.store.pending_ids import PendingIds
from memory.store.records import Row


class LogStore(StorePart):
    def __init__(self, collections: Collections) -> None:
        super().__init__(collections)
        self._pending = PendingIds()

    # -- groups and sessions ------------------------------------------------------------------

    def _register(self, group_id: str) -> None:
        self._collections.registry().upsert(
            **codec.written([codec.registry_record_id(group_id)], [group_id], [{"group_id": group_id}]),
            embeddings=codec.placeholders(1),
        )

    @store_call
    def register_group(self, group_id: str) -> None:
        self._register(group_id)

    @store_call
    def list_groups(self) -> list[str]:
        return sorted(document for _, document, _ in self._collections.rows(self._collections.registry()))

    @store_call
    def group_exists(self, group_id: str) -> bool:
        found = self._collections.registry().get(ids=[codec.registry_record_id(group_id)], include=[])
        return bool(found["ids"])

    @store_call
    def unregister_group(self, group_id: str) -> None:
        self._collections.remove(self._collections.registry(), [codec.registry_record_id(group_id)])

    def _put_documents(
        self, group_id: str, record_ids: list[str], documents: list[str], metadatas: list[dict[str, Any]]
    ) -> None:
        self._register(group_id)
        self._collections.written_log(group_id).rewrite(
            **codec.written(record_ids, documents, metadatas, overwrite=True),
            embeddings=codec.placeholders(len(record_ids)),
        )
        # Speakers' names live in these records.
        versions.changed(self._collections, group_id, change=Change(group_records=True))

    def _document(self, group_id: str, record_id: str) -> str | None:
        log = self._collections.log(group_id, create=False)
        if log is None:
            return None
        found = codec.rows_of(log.get(ids=[record_id], include=["documents", "metadatas"]))
        return found[0][1] if found else None

    @store_call
    def put_group_config(self, config: GroupConfiguration) -> None:
        self._put_documents(config.group_id, [codec.GROUP_RECORD_ID], [config.model_dump_json()], [{"kind": "group"}])

    @store_call
    def get_group_config(self, group_id: str) -> GroupConfiguration | None:
        document = self._document(group_id, codec.GROUP_RECORD_ID)
        return None if document is None else GroupConfiguration.model_validate_json(document)

    @store_call
    def put_session_info(self, info: SessionInfo) -> None:
        self._put_sessions(info.group_id, [info])

    @store_call
    def put_session_infos(self, group_id: str, infos: Sequence[SessionInfo]) -> None:
        """Several sessions' records of one group in one write."""
        if infos:
            self._put_sessions(group_id, infos)

    def _put_sessions(self, group_id: str, infos: Sequence[SessionInfo]) -> None:
        self._put_documents(
            group_id,
            [codec.session_record_id(info.session_id) for info in infos],
            [info.model_dump_json() for info in infos],
            [{"kind": "session", "session_id": info.session_id} for info in infos],
        )

    @store_call
    def get_session_info(self, group_id: str, session_id: str) -> SessionInfo | None:
        document = self._document(group_id, codec.session_record_id(session_id))
        return None if document is None else SessionInfo.model_validate_json(document)

    @store_call
    def list_sessions(self, group_id: str) -> list[SessionInfo]:
        log = self._collections.log(group_id, create=False)
        if log is None:
            return []
        rows = self._collections.rows(log, where={"kind": "session"})
        sessions = [SessionInfo.model_validate_json(document) for _, document, _ in rows]
        return sorted(sessions, key=lambda info: (info.created_at, info.session_id))

    # -- messages -----------------------------------------------------------------------------

    @store_call
    def get_messages(self, group_id: str, session_id: str, message_ids: Sequence[str]) -> dict[str, StoredMessage]:
        return self._messages(group_id, {session_id: message_ids}).get(session_id, {})

    @store_call
    def get_messages_of_sessions(
        self, group_id: str, wanted: Mapping[str, Sequence[str]]
    ) -> dict[str, dict[str, StoredMessage]]:
        """Messages of several sessions of one group by id, in one read: session id -> message id -> message."""
        return self._messages(group_id, wanted)

    def _messages(self, group_id: str, wanted: Mapping[str, Sequence[str]]) -> dict[str, dict[str, StoredMessage]]:
        ids = [codec.message_record_id(session, m) for session, messages in wanted.items() for m in messages]
        log = self._collections.log(group_id, create=False) if ids else None
        if log is None:
            return {}
        result: dict[str, dict[str, StoredMessage]] = {}
        for start in range(0, len(ids), PAGE):
            found = log.get(ids=ids[start : start + PAGE], include=["documents", "metadatas"])
            for _, text, metadata in codec.rows_of(found):
                stored = codec.stored_from_log(group_id, text, metadata)
                result.setdefault(stored.session_id, {})[stored.message.id] = stored
        return result

    @store_call
    def put_messages(self, group_id: str, messages: Sequence[StoredMessage]) -> None:
        """Upsert full message records into the group's log (one batch, atomic per call in Chroma)."""
        if messages:
            with self._tracked(group_id, messages):
                self._collections.written_log(group_id).rewrite(**codec.log_columns(list(messages), overwrite=True))
            written = tuple((codec.message_record_id(s.session_id, s.message.id), s.message) for s in messages)
            versions.changed(self._collections, group_id, change=Change(messages=written))

    @store_call
    def insert_messages(self, group_id: str, messages: Sequence[StoredMessage]) -> None:
        """Add message records that are not there yet. Chroma ignores ``add`` of an existing id, so a
        concurrent duplicate never overwrites a record whose state has moved on (FORMING, DONE)."""
        if messages:
            with self._tracked(group_id, messages):
                self._collections.written_log(group_id).add(**codec.log_columns(list(messages)))
            # Pending messages are read at once (live memory): the read snapshot adds them.
            added = tuple((codec.message_record_id(s.session_id, s.message.id), s.message) for s in messages)
            versions.changed(self._collections, group_id, change=Change(messages=added, insert=True))

    @store_call
    def set_states(self, group_id: str, messages: Sequence[StoredMessage]) -> None:
        """Write the processing state of stored messages (state, episode id, boundary) and nothing
        else: a metadata update, far cheaper than rewriting the records, which keeps each record's
        text, receipt time and sequence; a record deleted meanwhile stays deleted (an update never
        creates one)."""
        if not messages:
            return
        log = self._collections.log(group_id, create=False)
        if log is None:
            return
        with self._tracked(group_id, messages):
            log.update(
                ids=[codec.message_record_id(stored.session_id, stored.message.id) for stored in messages],
                metadatas=cast(Any, [codec.state_metadata(stored) for stored in messages]),
            )

    # A session's messages are selected by session and state, never by ``kind``: only message records
    # carry a state, and a clause on ``kind`` (which nearly every log record matches) makes Chroma read
    # the whole group's ids: 106 ms per count at 60,000 messages, 5 ms without (tests/benchmarks/ingest_growth.py).

    @store_call
    def count_messages(
        self, group_id: str, session_id: str, *, states: Iterable[MessageState], single_writer: bool = False
    ) -> int:
        """How many of a session's messages are in these states (ids only are read). ``single_writer``: no
        other process writes this session, so its pending messages are counted from the ids this process
        knows (memory.store.pending_ids; pending only)."""
        log = self._collections.log(group_id, create=False)
        if log is None:
            self._pending.forget(group_id, [session_id])
            return 0
        values = [state.value for state in states]
        where = {"$and": [{"session_id": session_id}, {"state": {"$in": values}}]}
        if not single_writer or values != [MessageState.PENDING.value]:
            return len(log.get(where=cast(Any, where), include=[])["ids"])
        return self._pending.count(
            (group_id, session_id),
            lambda: set(log.get(where=cast(Any, where), include=[])["ids"]),
            lambda ids: self._still_pending(log, ids),
        )

    @staticmethod
    def _still_pending(log: Any, ids: list[str]) -> set[str]:
        """Which of these records are pending, read by id a page at a time. The state is compared here: Chroma
        answers a read by ids that also has a ``where`` in time that grows with the collection (6-7 ms for 12
        records in a log of 60,000, against 0.9 ms)."""
        pending: set[str] = set()
        for start in range(0, len(ids), PAGE):
            page = log.get(ids=ids[start : start + PAGE], include=["metadatas"])
            metadatas = page["metadatas"] or []
            pending |= {
                record_id
                for record_id, metadata in zip(page["ids"], metadatas, strict=True)
                if (metadata or {}).get("state") == MessageState.PENDING.value
            }
        return pending

    @contextmanager
    def _tracked(self, group_id: str, messages: Sequence[StoredMessage]) -> Iterator[None]:
        """Around a write of message records: their states go to the pending ids once Chroma has them; a
        write that fails forgets their sessions (Chroma may have applied it)."""
        try:
            yield
        except BaseException:
            self._pending.forget(group_id, (stored.session_id for stored in messages))
            raise
        self._pending.written(group_id, messages)

    @store_call
    def list_messages(
        self, group_id: str, session_id: str, *, states: Iterable[MessageState] | None = None
    ) -> list[StoredMessage]:
        """A session's messages in event-time order (ties: arrival order)."""
        log = self._collections.log(group_id, create=False)
        if log is None:
            return []
        clauses: list[dict[str, Any]] = [{"session_id": session_id}]
        if states is not None:
            clauses.append({"state": {"$in": [state.value for state in states]}})
        rows = self._collections.rows(log, where=codec.where_all(clauses))
        records = [
            codec.stored_from_log(group_id, document, metadata)
            for _, document, metadata in rows
            if metadata.get("kind") == "message"  # not the session's own record
        ]
        return sorted(records, key=lambda stored: (stored.message.timestamp, stored.sequence))

    @store_call
    def sessions_with_unfinished_messages(self, group_id: str) -> set[str]:
        log = self._collections.log(group_id, create=False)
        if log is None:
            return set()
        unfinished = [state.value for state in MessageState if state is not MessageState.DONE]
        found = log.get(where=cast(Any, {"state": {"$in": unfinished}}), include=["metadatas"])
        return {str((meta or {})["session_id"]) for meta in found["metadatas"] or []}

    @store_call
    def delete_messages(self, group_id: str, session_id: str, message_ids: Sequence[str]) -> list[str]:
        """Remove message records from the log; returns the record ids removed (their vectors are the
        vector store's)."""
        log = self._collections.log(group_id, create=False)
        if log is None:
            return []
        removed = self._collections.remove(log, [codec.message_record_id(session_id, m) for m in message_ids])
        versions.changed(self._collections, group_id, change=Change(removed_messages=tuple(removed)))
        return removed

    # -- journals (summary plans) ----------------------------------------------------------------

    @store_call
    def put_record(self, group_id: str, record_id: str, document: str, metadata: dict[str, Any]) -> None:
        self._collections.written_log(group_id).rewrite(
            **codec.written([record_id], [document], [metadata], overwrite=True), embeddings=codec.placeholders(1)
        )

    @store_call
    def records(self, group_id: str, kind: str) -> list[Row]:
        """Every log record of a kind ("message", "session", a journal's kind...) as rows."""
        log = self._collections.log(group_id, create=False)
        return [] if log is None else list(self._collections.rows(log, where={"kind": kind}))

    @store_call
    def delete_records(self, group_id: str, ids: Sequence[str]) -> int:
        log = self._collections.log(group_id, create=False)
        return 0 if log is None else len(self._collections.remove(log, ids))

    # -- formation leases (memory.ingest.coordination) ---------------------------------------------

    @store_call
    def lease_records(self, group_id: str, session_id: str) -> list[dict[str, Any]]:
        log = self._collections.log(group_id, create=False)
        if log is None:
            return []
        where = {"$and": [{"kind": "lease"}, {"lease_of": session_id}]}
        return [dict(meta or {}) for meta in log.get(where=cast(Any, where), include=["metadatas"])["metadatas"] or []]

    @store_call
    def put_lease(
        self, group_id: str, session_id: str, epoch: int, metadata: dict[str, Any], *, insert: bool = False
    ) -> None:
        """``insert``: first writer of this epoch wins (``add``); otherwise the holder's update."""
        log = self._collections.written_log(group_id)
        write = log.add if insert else log.upsert
        write(
            ids=[codec.lease_record_id(session_id, epoch)],
            embeddings=codec.placeholders(1),
            metadatas=[{**metadata, "kind": "lease", "lease_of": session_id}],
        )

    @store_call
    def delete_leases(self, group_id: str, session_id: str, epochs: Sequence[int]) -> None:
        log = self._collections.log(group_id, create=False)
        if log is not None and epochs:
            log.delete(ids=[codec.lease_record_id(session_id, epoch) for epoch in epochs])
