"""The read model: one in-memory snapshot per group of what the read path reads on every request, handed
out as ``GroupReader``s (memory.readmodel.reader), its one interface.

Profiling ``/context`` showed most of its time in Chroma reads by id (the best episodes, their
messages' texts from the log, their vectors) and in rebuilding the same structures every call. A
``GroupSnapshot`` holds them for one version of the group (``memory.store.versions``; the changes the write
path publishes, ``memory.store.changes``, are applied to it by ``memory.readmodel.patch``):

- always, for every record of the group index, in its stored order: id, document, kind, session,
  episode, message id, event time, speakers, title (columns; what BM25, scope filters and the
  learned names need), and the structures the read path derives from it (``Derivation``s registered with
  ``register``: its keyword index, the speakers' names, scoring rows);
- when the group fits the size limit ("full"): also every record's metadata, its unit vector (the
  stored vector over its norm; the stored one is not kept), and the group's messages from the log
  (the exact ``Message`` a context line is printed from), so that a request reads nothing from
  Chroma but its one vector query;
- the group's configuration and sessions (the names a client set for speakers).

Snapshots are kept per group, least recently used first out, within a byte bound; a group bigger than the
bound on its own is still kept while it is the one in use, everything else goes. Correctness: a snapshot is used
only while the group's version is the one it was built at; the local part of the version is checked on every use
(free), the shared stamp of a Chroma server at most once per ``recheck_s`` per thread and group, and always at the
start of a search (``fresh=True``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memory.readmodel.build import read_snapshot
from memory.readmodel.files import folder_files
from memory.readmodel.follow import Follower
from memory.readmodel.open_episodes import OpenEpisodes
from memory.readmodel.patch import Patch, diff, patch
from memory.readmodel.reader import Derivation, GroupReader
from memory.readmodel.snapshot import GroupSnapshot, Version
from memory.readmodel.speakers import Speakers
from memory.readmodel.upgrades import Upgrades
from memory.readmodel.versions import Versions
from memory.store.factory import Store


@dataclass(frozen=True)
class CacheStats:
    """What the read model holds (``MemoryService.stats``)."""

    groups: int
    full_groups: int
    records: int
    bytes: int
    max_bytes: int
    max_groups: int
    hits: int
    builds: int
    evictions: int
    invalidations: int
    build_seconds: float
    extensions: int = 0  # builds that patched the cached snapshot with what writes changed (no read of the group)
    loads: int = 0  # builds that read the snapshot kept on disk at the last close (memory.readmodel.files)


# Records past which a group read from Chroma is read in two steps: ~10,000 records take about a second
# to read whole; a group of 69,000 took 12-13 s on a Chroma server, 4-7 s of it its vectors and messages.
TWO_STEP_RECORDS = 20_000


class ReadModel:
    def __init__(
        self,
        store: Store,
        *,
        max_bytes: int = 256 * 2**20,
        max_groups: int = 32,
        full_group_bytes: int | None = None,
        vector_group_bytes: int | None = None,
        recheck_s: float = 1.0,
        persist: bool = False,
        two_step_records: int | None = TWO_STEP_RECORDS,
    ) -> None:
        self._store = store
        self._versions = Versions(store, recheck_s=recheck_s)
        self.max_bytes = max_bytes
        self.max_groups = max_groups
        self.full_group_bytes = full_group_bytes if full_group_bytes is not None else max_bytes // 2
        # Past the full bound, a group within this one keeps its unit vectors, messages and episodes' metadata.
        self.vector_group_bytes = vector_group_bytes if vector_group_bytes is not None else max_bytes
        # A group of more records, read from Chroma, is read as columns first, the rest later; None: never.
        self.two_step_records = two_step_records
        self._upgrades = Upgrades(self._read_whole, self.install_upgrade, self._deferred)
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._entries: OrderedDict[str, GroupSnapshot] = OrderedDict()
        self.hits = self.builds = self.evictions = self.invalidations = self.extensions = 0
        self.loads = 0
        self.build_seconds = 0.0
        self._open_episodes, self._speakers = OpenEpisodes(), Speakers()
        # What the read path derives from a group, by key: patched with the group, kept on disk with it.
        self._derivations: dict[str, Derivation[Any]] = {}
        self.register(self._speakers)
        # The process's kept snapshots of an embedded folder (its writes scrub them from now on);
        # ``persist``: this read model loads them and keeps its snapshots there at close (the service's).
        files = folder_files(store.connection)
        self._files = files if persist else None
        if self._files is not None:
            self._files.open()
        # Embedded folders only: the groups this process writes are followed, so a write-only fill is kept at close.
        self._follower = Follower(self) if self._files is not None else None
        if self._files is not None:
            self._files.wanted = lambda group_id: self.cached(group_id) is None and self.has_room()
            store.connection.feed.subscribe(self._written)

    def register(self, *derivations: Derivation[Any]) -> None:
        """Derivations to patch with their group, keep on disk with it and restore from there (by key: a
        derivation registered again under a key replaces the one before)."""
        for derivation in derivations:
            self._derivations[derivation.key] = derivation

    def reader(self, group_id: str, *, fresh: bool = False) -> GroupReader:
        """The group as a reader sees it now; ``fresh``: read a Chroma server's shared stamp now (the start of
        a request), not one this thread read in the last ``recheck_s``."""
        return GroupReader(
            group_id,
            lambda: self.snapshot(group_id, fresh=fresh),
            vectors=self._store.vectors,
            log=self._store.log,
            grown=self.trim,
            open_episodes=self._open_episodes,
            speakers=self._speakers,
        )

    # -- the cache --------------------------------------------------------------------------------

    def cached(self, group_id: str) -> GroupSnapshot | None:
        with self._lock:
            return self._entries.get(group_id)

    def snapshot(self, group_id: str, *, fresh: bool = False) -> GroupSnapshot:
        """The group's snapshot at its current version (built when there is none or it is stale): what a
        reader reads (tests and benchmarks look at it; the read path reads through ``reader``)."""
        cached = self.cached(group_id)
        version = self._versions.now(group_id, fresh=fresh, cached=cached is not None)
        if (
            cached is not None
            and cached.version != version
            and self._versions.moved_by_own_stamp(cached.version, version)
        ):
            cached.version = version  # the stamp moved by this process's writes alone, all of them applied
        if cached is not None and cached.version == version:
            with self._lock:
                self.hits += 1
                if group_id in self._entries:
                    self._entries.move_to_end(group_id)
            return cached
        with self._lock:
            building = self._building.setdefault(group_id, threading.Lock())
        with building:  # one build per group at a time; the others wait for it
            cached = self.cached(group_id)
            if cached is not None and cached.version == version:
                return cached
            snapshot = self._extended(cached, version)
            if snapshot is None:
                snapshot = self._build(group_id, version)
                if cached is not None and len(cached):  # its derived structures patched, not built again
                    self._carry(snapshot, cached, diff(cached, snapshot))
            self._install(snapshot, replaced=cached is not None)
        if snapshot.deferred:
            self._upgrades.start(group_id)
        return snapshot

    def install_upgrade(self, upgraded: GroupSnapshot) -> bool:
        """Replace the group's deferred snapshot with ``upgraded`` (the same group read whole in the
        background), brought forward with this process's writes since it was read; False when it
        cannot be (the cached snapshot went, or is no longer deferred, or a write since is not
        journaled: the next read of the group reads it again)."""
        group_id = upgraded.group_id
        with self._lock:
            building = self._building.setdefault(group_id, threading.Lock())
        with building:
            cached = self.cached(group_id)
            if cached is None or not cached.deferred:
                return False
            version = self._versions.now(group_id, fresh=True, cached=False)
            if upgraded.version != version and self._versions.moved_by_own_stamp(upgraded.version, version):
                upgraded.version = version  # the stamp moved by this process's writes alone, all of them applied
            if upgraded.version != version:
                forward = self._extended(upgraded, version)
                if forward is None:
                    return False
                upgraded = forward
            self._carry(upgraded, cached, diff(cached, upgraded))
            self._install(upgraded)
        return True

    def _install(self, snapshot: GroupSnapshot, *, replaced: bool = False) -> None:
        """Cache a snapshot just built as its group's (``replaced``: an outdated one was cached)."""
        with self._lock:
            if replaced:
                self.invalidations += 1
            self._entries[snapshot.group_id] = snapshot
            self._entries.move_to_end(snapshot.group_id)
            self.builds += 1
            self.build_seconds += snapshot.built_s
            self._evict(keep=snapshot.group_id)

    def _read_whole(self, group_id: str, cancelled: Callable[[], bool]) -> GroupSnapshot:
        """The group read whole from the store (a background read)."""
        started = time.perf_counter()
        version = self._versions.now(group_id, fresh=True, cached=False)
        snapshot = self._read(group_id, version, cancelled=cancelled)
        snapshot.built_s = time.perf_counter() - started
        return snapshot

    def _read(self, group_id: str, version: Version, **how: Any) -> GroupSnapshot:
        """The group read from the store within the bounds (memory.readmodel.build.read_snapshot: ``how``)."""
        return read_snapshot(
            self._store.group_reads,
            group_id,
            version,
            full_group_bytes=self.full_group_bytes,
            vector_group_bytes=self.vector_group_bytes,
            **how,
        )

    def _deferred(self, group_id: str) -> bool:
        return (cached := self.cached(group_id)) is not None and cached.deferred

    def writes_to(self, group_id: str) -> int:
        return self._versions.local(group_id)

    def has_room(self) -> bool:
        with self._lock:
            used = sum(snapshot.total_bytes for snapshot in self._entries.values())
            return len(self._entries) < self.max_groups and used < self.max_bytes

    def _written(self, group_id: str) -> None:
        """A write to the group is about to be counted: a snapshot taken from its kept file by the write is cached
        at the version before it (the next read patches the write in); then the follower hears of it."""
        files, follower, version = self._files, self._follower, self._versions.now(group_id, fresh=False, cached=False)
        taken = files.take(group_id, version, self._derivations) if files is not None else None  # (None: closed)
        if taken is not None and self.cached(group_id) is None:
            self.loads += 1
            self._install(taken)
        if follower is not None:
            follower.written(group_id)

    def wait_followed(self, timeout: float | None = None) -> bool:
        """Until the writes so far have been followed (tests, benchmarks)."""
        return self._follower is None or self._follower.wait_idle(timeout)

    def wait_upgrades(self, timeout: float | None = None) -> None:
        """Until the background reads of deferred snapshots have ended (tests, benchmarks)."""
        self._upgrades.wait(timeout)

    def close(self) -> None:
        """Keep the snapshots at their group's current version on disk for the next start (embedded:
        memory.readmodel.files); the read model is not used after this."""
        if self._follower is not None:
            self._follower.stop()
        self._upgrades.stop()
        if self._files is None:
            return
        with self._lock:  # a deferred snapshot is not kept: the next start reads the group again
            entries = [snapshot for snapshot in self._entries.values() if not snapshot.deferred]
        for position, cached in enumerate(entries):  # brought up to date with this process's last writes
            current = self._versions.local(cached.group_id)
            if cached.version[0] < current:
                entries[position] = self._extended(cached, (current, None)) or cached
        self._files.close(entries, self._versions.local, self._derivations)
        self._files = None

    def forget(self, group_id: str | None = None) -> None:
        with self._lock:
            if group_id is None:
                self._entries.clear()
            else:
                self._entries.pop(group_id, None)

    def scrub(self, group_id: str) -> None:
        """Called after a delete (and other changes the service announces): the group's snapshot is
        replaced at once by one patched with what this process's writes since changed (deleted rows,
        messages and keyword tokens gone), or dropped when that cannot be done (a write not journaled, on
        a Chroma server another process's write since); nothing deleted stays cached until the next read."""
        with self._lock:
            building = self._building.setdefault(group_id, threading.Lock())
        with building:
            with self._lock:
                cached = self._entries.pop(group_id, None)
            if cached is None:
                return
            snapshot = self._extended(cached, self._versions.now(group_id, fresh=True, cached=False))
            if snapshot is not None:
                with self._lock:
                    self._entries[group_id] = snapshot
                    self.builds += 1
                    self.invalidations += 1
                    self.build_seconds += snapshot.built_s

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def trim(self) -> None:
        """Apply the bounds again (derived structures grow a snapshot after it was stored)."""
        with self._lock:
            newest = next(reversed(self._entries), None)
            self._evict(keep=newest)

    def _evict(self, keep: str | None) -> None:
        def total() -> int:
            return sum(snapshot.total_bytes for snapshot in self._entries.values())

        while len(self._entries) > 1 and (len(self._entries) > self.max_groups or total() > self.max_bytes):
            oldest = next(iter(self._entries))
            if oldest == keep:
                self._entries.move_to_end(oldest)
                oldest = next(iter(self._entries))
                if oldest == keep:
                    break
            del self._entries[oldest]
            self.evictions += 1

    def stats(self) -> CacheStats:
        with self._lock:
            entries = list(self._entries.values())
            return CacheStats(
                groups=len(entries),
                full_groups=sum(1 for snapshot in entries if snapshot.full),
                records=sum(len(snapshot) for snapshot in entries),
                bytes=sum(snapshot.total_bytes for snapshot in entries),
                max_bytes=self.max_bytes,
                max_groups=self.max_groups,
                hits=self.hits,
                builds=self.builds,
                evictions=self.evictions,
                invalidations=self.invalidations,
                build_seconds=round(self.build_seconds, 3),
                extensions=self.extensions,
                loads=self.loads,
            )

    # -- building -----------------------------------------------------------------------------------

    def _extended(self, cached: GroupSnapshot | None, version: Version) -> GroupSnapshot | None:
        """The cached snapshot patched with what this process's writes since changed (memory.readmodel.patch),
        when the feed still has every one of them: no read of the group's records, and its keyword index
        patched rather than built again. With a Chroma server, only when the shared stamp says that no other
        process wrote since (memory.store.versions.only_own)."""
        if cached is None or version[0] <= cached.version[0]:
            return None
        if not self._versions.only_own_writes(cached.version, version):
            return None
        changes = self._store.connection.feed.since(cached.group_id, cached.version[0], version[0])
        if changes is None:
            return None
        started = time.perf_counter()
        found = patch(
            cached, changes, version, full_group_bytes=self.full_group_bytes, vector_group_bytes=self.vector_group_bytes
        )
        if found is None:
            return None
        snapshot, how = found
        if any(change.group_records for change in changes):
            records = self._store.group_reads.group_records(snapshot.group_id)
            if records is not None:
                snapshot.config, snapshot.sessions = records
        self._carry(snapshot, cached, how)
        snapshot.built_s = time.perf_counter() - started
        self.extensions += 1
        return snapshot

    def _build(self, group_id: str, version: Version) -> GroupSnapshot:
        """The group's snapshot from its kept file, else read from the store: a group of more than
        ``two_step_records`` records as columns first (``deferred``: the rest follows in the background)."""
        started = time.perf_counter()
        count = self._store.group_reads.count(group_id)
        if self._files is not None and count:
            loaded = self._files.load(group_id, version, count, self._derivations)
            if loaded is not None:
                loaded.built_s = time.perf_counter() - started
                self.loads += 1
                return loaded
        columns_only = self.two_step_records is not None and count > self.two_step_records
        snapshot = self._read(group_id, version, count=count, columns_only=columns_only)
        snapshot.built_s = time.perf_counter() - started
        return snapshot

    def _carry(self, patched: GroupSnapshot, previous: GroupSnapshot, how: Patch) -> None:
        """The previous snapshot's derived structures that can be patched, carried over to the new one."""
        for key, value in previous.derived_items():
            derivation = self._derivations.get(key)
            if derivation is None:
                continue
            carried = derivation.patched(value, patched, how, previous)
            if carried is not None:
                patched.adopt(key, carried, derivation.size(carried))
