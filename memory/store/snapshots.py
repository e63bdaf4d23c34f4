"""Read caches: one in-memory snapshot per group of what the read path reads on every request.

Profiling ``/context`` showed most of its time in Chroma reads by id (the best episodes, their
messages' texts from the log, their vectors) and in rebuilding the same structures every call. A
``GroupSnapshot`` holds them for one version of the group (``memory.store.versions``):

- always, for every record of the group index, in its stored order: id, document, kind, session,
  episode, message id, event time, speakers, title (columns; what BM25, scope filters and the
  learned names need), and derived structures the read path hangs on it (its keyword index);
- when the group fits the size limit ("full"): also every record's metadata, its stored vector and
  that vector's norm, and the group's messages from the log (the exact ``Message`` a context line
  is printed from), so that a request reads nothing from Chroma but its one vector query;
- the group's configuration and sessions (the names a client set for speakers).

Snapshots are kept per group, least recently used first out, within a byte bound; a group bigger
than the bound on its own is still kept while it is the one in use (its keyword index serves every
search), everything else goes. Correctness: a snapshot is used only while the group's version is
the one it was built at; the local part of the version is checked on every use (free), the shared
stamp of a Chroma server at most once per ``recheck_s`` per thread and group, and always at the
start of a search (``fresh=True``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.models import Episode, GroupConfiguration, Message, SessionInfo
from memory.store import codec, versions
from memory.store.records import VectorRecord
from memory.store.versions import Version

if TYPE_CHECKING:
    from memory.store.collections import Collections

# Records per read. Chroma keeps much of what one large read allocated: a group index of 20,000 records read
# in pages of 5,000 left the process 312 MB larger after the pages were freed, in pages of 1,000 90 MB
# (partitions.py data, docs/benchmarks-speed.md); the first search's peak fell from 1,013 to 825 MB.
PAGE = 1000

KINDS = ("episode", "summary", "message")
KIND_CODE = {kind: code for code, kind in enumerate(KINDS)}
OTHER_KIND = len(KINDS)
# Bytes a full snapshot is estimated to hold per record beyond its vector (metadata, message): what
# decides, from the group's count alone, whether it is read in full.
FULL_RECORD_BYTES = 1600


@dataclass(eq=False)
class GroupSnapshot:
    group_id: str
    version: Version
    ids: list[str]
    positions: dict[str, int]
    documents: list[str]
    kinds: np.ndarray  # int8 codes (KINDS, OTHER_KIND)
    session_codes: np.ndarray  # int32, into session_names
    session_names: list[str]
    timestamps: np.ndarray  # float64 epoch seconds
    episode_ids: list[str]
    message_ids: list[str]
    producers: list[str]
    produced_for: list[str]
    titles: list[str]
    config: GroupConfiguration | None
    sessions: list[SessionInfo]
    full: bool = False
    metadatas: list[dict[str, Any]] | None = None
    vectors: np.ndarray | None = None  # float32 (records x dimension), as stored
    directions: np.ndarray | None = None  # each vector / float(np.linalg.norm(vector)): the read path's unit()
    messages: dict[str, Message] | None = None  # message record id -> message (full only)
    nbytes: int = 0
    built_s: float = 0.0
    _episodes: dict[str, Episode] = field(default_factory=dict)
    _derived: dict[str, Any] = field(default_factory=dict)
    _derived_bytes: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def session_index(self) -> dict[str, int]:
        return self.derived("session-index", lambda: {name: code for code, name in enumerate(self.session_names)})

    def record(self, position: int) -> VectorRecord:
        """The record at a position: its stored metadata when full, else the metadata the columns hold."""
        if self.metadatas is not None:
            metadata = self.metadatas[position]
        else:
            kind = int(self.kinds[position])
            metadata = {
                "kind": KINDS[kind] if kind < OTHER_KIND else "",
                "group_id": self.group_id,
                "session_id": self.session_names[int(self.session_codes[position])],
                "episode_id": self.episode_ids[position],
                "ts": float(self.timestamps[position]),
            }
            for key, value in (
                ("message_id", self.message_ids[position]),
                ("producer_id", self.producers[position]),
                ("produced_for_id", self.produced_for[position]),
                ("title", self.titles[position]),
            ):
                if value:
                    metadata[key] = value
        return VectorRecord(self.ids[position], self.documents[position], metadata)

    def record_by_id(self, record_id: str) -> VectorRecord | None:
        position = self.positions.get(record_id)
        return None if position is None else self.record(position)

    def episode(self, record_id: str) -> Episode | None:
        """The episode or summary of a record id (full snapshots only; parsed once)."""
        cached = self._episodes.get(record_id)
        if cached is not None:
            return cached
        position = self.positions.get(record_id)
        if position is None or self.metadatas is None or int(self.kinds[position]) > KIND_CODE["summary"]:
            return None
        episode = codec.episode_from_record(self.documents[position], self.metadatas[position])
        self._episodes[record_id] = episode
        return episode

    def vector(self, record_id: str) -> np.ndarray | None:
        position = self.positions.get(record_id)
        return None if position is None or self.vectors is None else self.vectors[position]

    def direction(self, record_id: str) -> np.ndarray | None:
        """The record's unit vector, computed as ``vector / float(norm(vector))`` (the read path's rule)."""
        position = self.positions.get(record_id)
        return None if position is None or self.directions is None else self.directions[position]

    def derived(self, key: str, build: Callable[[], Any], size: Callable[[Any], int] | None = None) -> Any:
        """A structure built from this snapshot once (the read path's keyword index, names...), kept
        with it and counted in its size."""
        found = self._derived.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._derived.get(key)
            if found is None:
                found = build()
                self._derived[key] = found
                self._derived_bytes[key] = size(found) if size is not None else 0
        return found

    def has(self, key: str) -> bool:
        return key in self._derived

    @property
    def total_bytes(self) -> int:
        return self.nbytes + sum(self._derived_bytes.values())


@dataclass(frozen=True)
class CacheStats:
    """What the read cache holds (``MemoryService.stats``)."""

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


class SnapshotCache:
    def __init__(
        self,
        collections: Collections,
        *,
        max_bytes: int = 256 * 2**20,
        max_groups: int = 32,
        full_group_bytes: int | None = None,
        recheck_s: float = 1.0,
    ) -> None:
        self._collections = collections
        self.max_bytes = max_bytes
        self.max_groups = max_groups
        self.full_group_bytes = full_group_bytes if full_group_bytes is not None else max_bytes // 2
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._entries: OrderedDict[str, GroupSnapshot] = OrderedDict()
        self._checked = threading.local()  # group -> (monotonic time, stamp) of this thread's last check
        self.hits = self.builds = self.evictions = self.invalidations = 0
        self.build_seconds = 0.0

    # -- versions ---------------------------------------------------------------------------------

    def version(self, group_id: str, *, fresh: bool, cached: GroupSnapshot | None) -> Version:
        """The group's version now; the shared stamp is read again when ``fresh`` or when this thread
        has not read it for ``recheck_s`` (inside a store call)."""
        local = versions.local(self._collections, group_id)
        if not self._collections.connection.shared:
            return (local, None)
        checked: dict[str, tuple[float, str | None]] = self._checked.__dict__.setdefault("groups", {})
        now = time.monotonic()
        last = checked.get(group_id)
        if not fresh and last is not None and now - last[0] < self.recheck_s and cached is not None:
            return (local, last[1])
        stamp = versions.shared_stamp(self._collections, group_id)
        checked[group_id] = (now, stamp)
        return (local, stamp)

    # -- the cache --------------------------------------------------------------------------------

    def cached(self, group_id: str) -> GroupSnapshot | None:
        with self._lock:
            return self._entries.get(group_id)

    def get(self, group_id: str, *, fresh: bool = False) -> GroupSnapshot:
        """The group's snapshot at its current version (built when there is none or it is stale).
        Runs inside a store call."""
        cached = self.cached(group_id)
        version = self.version(group_id, fresh=fresh, cached=cached)
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
            snapshot = self._build(group_id, version)
            with self._lock:
                if cached is not None:
                    self.invalidations += 1
                self._entries[group_id] = snapshot
                self._entries.move_to_end(group_id)
                self.builds += 1
                self.build_seconds += snapshot.built_s
                self._evict(keep=group_id)
        return snapshot

    def forget(self, group_id: str | None = None) -> None:
        with self._lock:
            if group_id is None:
                self._entries.clear()
            else:
                self._entries.pop(group_id, None)

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
            )

    # -- building -----------------------------------------------------------------------------------

    def _build(self, group_id: str, version: Version) -> GroupSnapshot:
        started = time.perf_counter()
        index = self._collections.vectors(group_id)
        count = index.count() if index is not None else 0
        dimension = 0
        full = count * FULL_RECORD_BYTES <= self.full_group_bytes  # the vectors are added once known
        ids: list[str] = []
        documents: list[str] = []
        metadatas: list[dict[str, Any]] = []
        pages: list[np.ndarray] = []
        include: list[Any] = ["documents", "metadatas"] + (["embeddings"] if full else [])
        offset = 0
        while index is not None:
            page = index.get(include=include, limit=PAGE, offset=offset)
            ids += page["ids"]
            documents += [document or "" for document in page["documents"] or []]
            metadatas += [dict(metadata or {}) for metadata in page["metadatas"] or []]
            if full and page["ids"]:
                vectors = np.asarray(page["embeddings"], dtype=np.float32)
                dimension = vectors.shape[1]
                pages.append(vectors)
            if len(page["ids"]) < PAGE:
                break
            offset += PAGE
        if full and count * (FULL_RECORD_BYTES + 4 * dimension) > self.full_group_bytes:
            full, pages = False, []
        snapshot = _columns(group_id, version, ids, documents, metadatas)
        log = self._collections.log(group_id, create=False)
        if log is not None:
            snapshot.config, snapshot.sessions = _group_records(self._collections, log, group_id)
        if full:
            vectors = np.concatenate(pages) if pages else np.zeros((0, dimension), dtype=np.float32)
            pages.clear()
            snapshot.full = True
            snapshot.metadatas = metadatas
            snapshot.vectors = vectors
            # Row by row, as unit() divides one vector by its norm: the same float32 values as before.
            directions = np.empty_like(vectors)
            for position, row in enumerate(vectors):
                directions[position] = row / (float(np.linalg.norm(row)) or 1.0)
            snapshot.directions = directions
            snapshot.messages = _messages(self._collections, log, group_id) if log is not None else {}
        snapshot.nbytes = _size(snapshot)
        snapshot.built_s = time.perf_counter() - started
        return snapshot


def _columns(
    group_id: str, version: Version, ids: list[str], documents: list[str], metadatas: list[dict[str, Any]]
) -> GroupSnapshot:
    session_index: dict[str, int] = {}
    interned: dict[str, str] = {}

    def intern(value: Any) -> str:
        text = "" if value is None else str(value)
        return interned.setdefault(text, text)

    codes = np.empty(len(ids), dtype=np.int32)
    kinds = np.empty(len(ids), dtype=np.int8)
    times = np.empty(len(ids), dtype=np.float64)
    episode_ids, message_ids, producers, produced_for, titles = [], [], [], [], []
    for position, (record_id, metadata) in enumerate(zip(ids, metadatas, strict=True)):
        session = str(metadata.get("session_id", ""))
        codes[position] = session_index.setdefault(session, len(session_index))
        kinds[position] = KIND_CODE.get(str(metadata.get("kind", "")), OTHER_KIND)
        times[position] = float(metadata.get("ts", 0.0))
        episode_ids.append(str(metadata.get("episode_id", record_id)))
        message_ids.append(str(metadata.get("message_id", "")))
        producers.append(intern(metadata.get("producer_id") or ""))
        produced_for.append(intern(metadata.get("produced_for_id") or ""))
        titles.append(str(metadata.get("title", "")))
    return GroupSnapshot(
        group_id=group_id,
        version=version,
        ids=ids,
        positions={record_id: position for position, record_id in enumerate(ids)},
        documents=documents,
        kinds=kinds,
        session_codes=codes,
        session_names=list(session_index),
        timestamps=times,
        episode_ids=episode_ids,
        message_ids=message_ids,
        producers=producers,
        produced_for=produced_for,
        titles=titles,
        config=None,
        sessions=[],
    )


def _group_records(
    collections: Collections, log: Any, group_id: str
) -> tuple[GroupConfiguration | None, list[SessionInfo]]:
    found = log.get(ids=[codec.GROUP_RECORD_ID], include=["documents"])
    config = GroupConfiguration.model_validate_json(found["documents"][0]) if found["ids"] else None
    rows = collections.rows(log, where={"kind": "session"})
    sessions = sorted(
        (SessionInfo.model_validate_json(document) for _, document, _ in rows),
        key=lambda info: (info.created_at, info.session_id),
    )
    return config, sessions


def _messages(collections: Collections, log: Any, group_id: str) -> dict[str, Message]:
    return {
        record_id: codec.stored_from_log(group_id, document, metadata).message
        for record_id, document, metadata in collections.rows(log, where={"kind": "message"})
    }


def _size(snapshot: GroupSnapshot) -> int:
    """Bytes held, estimated: strings by length, dictionaries by entries, arrays exactly."""
    strings = sum(len(text) + 56 for column in (snapshot.ids, snapshot.documents) for text in column)
    strings += 8 * 6 * len(snapshot)  # list slots of the other columns (their strings are shared or short)
    strings += sum(len(text) + 56 for text in snapshot.message_ids if text)
    strings += sum(len(text) + 56 for text in snapshot.titles if text)
    arrays = snapshot.kinds.nbytes + snapshot.session_codes.nbytes + snapshot.timestamps.nbytes
    positions = sys.getsizeof(snapshot.positions)
    full = 0
    if snapshot.metadatas is not None:
        full += sum(
            232 + 32 * len(metadata) + sum(len(str(v)) for v in metadata.values()) for metadata in snapshot.metadatas
        )
    if snapshot.vectors is not None:
        full += 2 * snapshot.vectors.nbytes
    if snapshot.messages:
        full += sum(600 + 2 * len(message.content) for message in snapshot.messages.values())
    return strings + arrays + positions + full
