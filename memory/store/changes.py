"""What this process's writes did to each group, as the write path publishes it: the one way a write reaches
the read model (``memory.readmodel``), which applies it to the group's copy instead of reading the group again.

Every write of a group's records (the vector store's, the log's, the admin's drops and rebuilds) publishes
one ``Change`` to its connection's ``ChangeFeed`` once Chroma has it (``memory.store.versions.changed``): the
feed numbers the group's writes (a group's *local version*) and keeps the last ``JOURNAL`` of them; a write
that cannot say what it did publishes None, which empties the group's journal (a reader then reads the group
again). Subscribers are told of each write before it is counted (the read model scrubs what it kept on disk
of the group), so a reader that reads the version after a write never finds a copy from before it.

The write path holds no read-side object: it publishes; whoever keeps a copy of a group subscribes or asks the
feed what changed between two versions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memory.models import Message
from memory.store.records import VectorRecord

JOURNAL = 512  # writes kept per group for the readers to replay


@dataclass(frozen=True)
class Change:
    """What one write did to a group, in the order it did it: vector records removed, then ``records``
    written whole (an upsert: an existing record's metadata is merged with the new one, unless ``merge`` is
    False: replaced), then ``updates`` (metadata merged into existing records; a None value removes its
    key); log messages written (by log record id; ``insert``: only those not there yet) or removed;
    ``group_records``: the group's configuration or session records were written."""

    records: tuple[VectorRecord, ...] = ()
    merge: bool = True
    removed: tuple[str, ...] = ()
    updates: tuple[tuple[str, dict[str, Any]], ...] = ()
    messages: tuple[tuple[str, Message], ...] = ()
    insert: bool = False
    removed_messages: tuple[str, ...] = ()
    group_records: bool = False


Listener = Callable[[str], None]


class ChangeFeed:
    """The writes of one connection's process, numbered per group, the last ``JOURNAL`` kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}  # group -> writes by this process
        self._journal: dict[str, dict[int, Change]] = {}  # group -> local version -> what that write changed
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(group_id)`` for every write from now on, before it is counted."""
        with self._lock:
            self._listeners.append(listener)

    def publish(self, group_id: str, change: Change | None) -> int:
        """Count a write of this process to a group (``change``: what it did; None when it does not say).
        Returns the group's new local version."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:  # before the version moves
            listener(group_id)
        with self._lock:
            version = self._versions.get(group_id, 0) + 1
            self._versions[group_id] = version
            journal = self._journal.setdefault(group_id, {})
            if change is None:
                journal.clear()
            else:
                journal[version] = change
                while len(journal) > JOURNAL:
                    del journal[min(journal)]
        return version

    def version(self, group_id: str) -> int:
        """The group's local version: how many writes this process made to it."""
        with self._lock:
            return self._versions.get(group_id, 0)

    def written(self) -> list[str]:
        """The groups this process wrote."""
        with self._lock:
            return list(self._versions)

    def since(self, group_id: str, after: int, upto: int) -> list[Change] | None:
        """What writes ``after + 1`` … ``upto`` of a group changed, in order; None when one of them did not
        say (or is no longer kept)."""
        with self._lock:
            journal = self._journal.get(group_id, {})
            found = [journal.get(version) for version in range(after + 1, upto + 1)]
        return None if any(item is None for item in found) else [item for item in found if item is not None]
