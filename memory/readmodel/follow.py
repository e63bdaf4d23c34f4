"""A server that only writes a group (a fill, an import, a batch job) keeps the group's snapshot current too, so
that the snapshot is kept on disk at its close and the next start loads it instead of reading the group from
Chroma (embedded folders: ``memory.readmodel.files``).

The change feed keeps the last ``JOURNAL`` writes of a group (``memory.store.changes``); a snapshot left behind by
more than that can only be read again. After this process's writes to a group reach half of that since its
snapshot (or since the group was last looked at here), a background thread brings the snapshot forward by
patching it (``ReadModel.snapshot``), or builds it when the group has none and the read cache has room for it:
a group written this way never pushes out a group that is read. A group written less than that is left to its
readers, as before.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from memory.background import background_thread
from memory.readmodel.snapshot import GroupSnapshot
from memory.store.changes import JOURNAL

log = logging.getLogger(__name__)


class Followed(Protocol):
    """What the follower asks of the read model."""

    def cached(self, group_id: str) -> GroupSnapshot | None: ...

    def writes_to(self, group_id: str) -> int: ...

    def has_room(self) -> bool: ...

    def snapshot(self, group_id: str, *, fresh: bool = False) -> GroupSnapshot: ...


class Follower:
    """Looks at a group in one background thread after writes to it, at most once per group at a time; writes
    that land meanwhile ask for one more look."""

    def __init__(self, model: Followed) -> None:
        self._model = model
        self._followed: dict[str, int] = {}  # group -> this process's writes to it when last caught up
        self._changed = threading.Condition()
        self._pending: dict[str, None] = {}  # groups written since their last run, in order
        self._running = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def written(self, group_id: str) -> None:
        """A write to the group (a change feed listener: called before the write is counted)."""
        with self._changed:
            if self._stopping:
                return
            self._pending[group_id] = None
            if self._thread is None:
                self._thread = background_thread(self._run, name="epimem-snapshot-follow")
                self._thread.start()
            self._changed.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until no group waits for a run and none is under way (tests, benchmarks); False when ``timeout``
        passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._running, timeout)

    def stop(self) -> None:
        """No run from now on; waits for the one under way (the read model is closing)."""
        with self._changed:
            self._stopping = True
            thread = self._thread
            self._changed.notify_all()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._running = False
                self._changed.notify_all()
                self._changed.wait_for(lambda: self._pending or self._stopping)
                if self._stopping:
                    return
                group_id = next(iter(self._pending))
                del self._pending[group_id]
                self._running = True
            try:
                self.catch_up(group_id)
            except Exception:  # a follower that stopped would leave every later fill unkept
                log.exception("keeping the snapshot of group %r current failed", group_id)

    def catch_up(self, group_id: str) -> None:
        """The group's snapshot patched with this process's writes once they reach half of what the change feed
        keeps, or built when it has none and the cache has room."""
        model = self._model
        cached = model.cached(group_id)
        if cached is not None and cached.deferred:
            return  # its background read brings it forward when it ends
        written = model.writes_to(group_id)
        since = max(cached.version[0] if cached is not None else 0, self._followed.get(group_id, 0))
        if written - since < JOURNAL // 2:
            return
        self._followed[group_id] = written
        if cached is None and not model.has_room():
            return
        model.snapshot(group_id)
