"""The ids of each session's pending messages, kept by this process, so that counting them (every add
does, to decide on formation) reads those records by id instead of filtering the group's whole log.

Chroma answers any filtered read of a collection in time that grows with the collection: a count of
one session's pending messages took 7-9 ms in a log of 60,000 records and 1 ms in one of 1,400, while a
read of a few records by id takes 0.4-0.9 ms at either size (tests/benchmarks/ingest_growth.py).

A session's ids are read once with the filter; from then on, every write of this process that makes a
message pending adds its id, and a count reads only the known ids, by id, and keeps those still pending:
a message that left the pending state or was deleted drops out there. What this process cannot see is a record
made pending by another process, so callers use it only when no other process writes the same sessions
(``Coordinator.distributed`` false); a write that fails forgets its sessions (Chroma may have applied it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from memory.models import MessageState, StoredMessage
from memory.store import codec

Key = tuple[str, str]  # (group, session)


class PendingIds:
    def __init__(self, max_sessions: int = 10_000) -> None:
        self._max_sessions = max_sessions
        # Held across the count's read: a write's update waits for it, so a count never overwrites an id
        # that a write added while it read (writes update after Chroma has the record).
        self._lock = threading.Lock()
        self._known: OrderedDict[Key, set[str]] = OrderedDict()

    def count(self, key: Key, read_all: Callable[[], set[str]], read_known: Callable[[list[str]], set[str]]) -> int:
        """How many of the session's messages are pending: ``read_all`` (the filtered read) the first time,
        then ``read_known`` (which of these record ids are still pending)."""
        with self._lock:
            known = self._known.get(key)
            found = read_all() if known is None else read_known(sorted(known)) if known else set()
            self._known[key] = found
            self._known.move_to_end(key)
            while len(self._known) > self._max_sessions:
                self._known.popitem(last=False)
            return len(found)

    def written(self, group_id: str, messages: Iterable[StoredMessage]) -> None:
        """Messages written with these states (sessions not counted yet are left to their first read)."""
        with self._lock:
            for stored in messages:
                known = self._known.get((group_id, stored.session_id))
                if known is None:
                    continue
                record_id = codec.message_record_id(stored.session_id, stored.message.id)
                if stored.state is MessageState.PENDING:
                    known.add(record_id)
                else:
                    known.discard(record_id)

    def forget(self, group_id: str, session_ids: Iterable[str]) -> None:
        with self._lock:
            for session_id in set(session_ids):
                self._known.pop((group_id, session_id), None)
