"""The version of a group a reader reads (memory.store.versions): how many writes this process made to it (its
connection's change feed: free to read) and, with a Chroma server, the group's shared stamp, read again at most
once per ``recheck_s`` per thread and group, and always when a request starts (``fresh``)."""

from __future__ import annotations

import threading
import time

from memory.readmodel.snapshot import Version
from memory.store import versions
from memory.store.factory import Store


class Versions:
    def __init__(self, store: Store, *, recheck_s: float) -> None:
        self._store = store
        self._connection = store.connection
        self.recheck_s = recheck_s
        self._checked = threading.local()  # group -> (monotonic time, stamp) of this thread's last check

    def local(self, group_id: str) -> int:
        """The writes this process made to the group."""
        return self._connection.feed.version(group_id)

    def now(self, group_id: str, *, fresh: bool, cached: bool) -> Version:
        """The group's version now; the shared stamp is read again when ``fresh``, when nothing of the group is
        ``cached``, or when this thread has not read it for ``recheck_s``."""
        local = self.local(group_id)
        if not self._connection.shared:
            return (local, None)
        checked: dict[str, tuple[float, str | None]] = self._checked.__dict__.setdefault("groups", {})
        now = time.monotonic()
        last = checked.get(group_id)
        if not fresh and last is not None and now - last[0] < self.recheck_s and cached:
            return (local, last[1])
        stamp = self._store.group_reads.stamp(group_id)
        checked[group_id] = (now, stamp)
        return (local, stamp)

    def moved_by_own_stamp(self, before: Version, after: Version) -> bool:
        """With a Chroma server: the same writes of this process, and a stamp that moved by this process's own
        key alone (a stamp read a moment late)."""
        connection = self._connection
        return connection.shared and before[0] == after[0] and versions.only_own(before[1], after[1], connection.run_id)

    def only_own_writes(self, before: Version, after: Version) -> bool:
        """Whether every write between the two versions is this process's (its change feed says what they did):
        always with embedded Chroma; with a server, when the shared stamp moved by this process's key alone."""
        connection = self._connection
        return not connection.shared or versions.only_own(before[1], after[1], connection.run_id)
