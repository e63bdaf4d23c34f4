"""One group's read snapshot: the columns of every record of its index; when "full" also the records'
metadata, unit vectors and the group's messages; for a group past that size limit but within a larger one,
the unit vectors and messages without the metadata (memory.readmodel.model keeps them, per version; readers
see them through memory.readmodel.reader, never by their tier)."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory.models import Episode, GroupConfiguration, Message, SessionInfo
from memory.readmodel.row_buffer import RowBuffer
from memory.store import codec
from memory.store.records import VectorRecord

KINDS = ("episode", "summary", "message")
# Bytes a full snapshot is estimated to hold per record beyond its vector (metadata, message): what
# decides, from the group's count alone, whether it is read in full (memory.readmodel.build).
FULL_RECORD_BYTES = 1600
# The same for a group past that bound that still keeps its unit vectors and messages (not its records'
# metadata, nor parsed episodes): a search then reads no message and no vector from Chroma or the log.
VECTOR_RECORD_BYTES = 1000
KIND_CODE = {kind: code for code, kind in enumerate(KINDS)}
# Episodes a snapshot keeps parsed (least recently used out): ~2.8 KB each, outside the cache's byte
# bound; a search parses a few hundred, a full group holds up to ~40,000 (~120 MB if all were kept).
PARSED_EPISODES_KEPT = 4096
OTHER_KIND = len(KINDS)

# A column of strings, one per record: an object array, which the garbage collector never visits (a
# list of 70,000 was visited by every young collection until it was old, a tuple once: ~5-7 ms a write
# to a big group's seven columns, measured) and which a patch extends with one copy of pointers.
Column = np.ndarray


def strings(values: Iterable[str]) -> Column:
    found = list(values)
    column = np.empty(len(found), dtype=object)
    column[:] = found
    return column


# What a snapshot is labelled with (memory.store.versions): (writes of this process, the shared stamp;
# None: embedded or no record).
Version = tuple[int, str | None]


@dataclass(eq=False)
class GroupSnapshot:
    group_id: str
    version: Version
    ids: Column
    positions: dict[str, int]
    documents: Column
    kinds: np.ndarray  # int8 codes (KINDS, OTHER_KIND)
    session_codes: np.ndarray  # int32, into session_names
    session_names: list[str]
    timestamps: np.ndarray  # float64 epoch seconds
    episode_ids: Column
    message_ids: Column
    producers: Column
    produced_for: Column
    titles: Column
    config: GroupConfiguration | None
    sessions: list[SessionInfo]
    full: bool = False
    # Read as columns alone although the group fits a larger tier: the rest is being read in the
    # background (memory.readmodel.upgrades: two-step reads of big groups).
    deferred: bool = False
    metadatas: list[dict[str, Any]] | None = None
    # Past the full bound, with the vectors kept: the metadata of the episode and summary records alone, by record
    # id, so that a request parses its episodes here instead of reading them from Chroma.
    episode_metadatas: dict[str, dict[str, Any]] | None = None
    # Each stored vector / float(np.linalg.norm(vector)), float32 (records x dimension): the read path's
    # unit(). Every reader wants directions, so the vectors as stored are not kept.
    directions: np.ndarray | None = None
    messages: dict[str, Message] | None = None  # message record id -> message (kept with the directions)
    row_buffer: RowBuffer | None = None  # what ``directions`` views, with room for appended rows
    nbytes: int = 0
    built_s: float = 0.0
    _episodes: OrderedDict[str, Episode] = field(default_factory=OrderedDict)
    _derived: dict[str, Any] = field(default_factory=dict)
    _derived_bytes: dict[str, int] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)  # a build may need another derived value

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

    @property
    def holds_episodes(self) -> bool:
        """Whether every episode and summary of this version is parsed from the snapshot (none read from Chroma)."""
        return self.metadatas is not None or self.episode_metadatas is not None

    def episode(self, record_id: str) -> Episode | None:
        """The episode or summary of a record id (snapshots that hold episodes only; parsed once)."""
        with self._lock:
            cached = self._episodes.get(record_id)
            if cached is not None:
                self._episodes.move_to_end(record_id)
                return cached
        position = self.positions.get(record_id)
        if position is None or int(self.kinds[position]) > KIND_CODE["summary"]:
            return None
        if self.metadatas is not None:
            metadata = self.metadatas[position]
        elif self.episode_metadatas is not None and record_id in self.episode_metadatas:
            metadata = self.episode_metadatas[record_id]
        else:
            return None
        episode = codec.episode_from_record(self.documents[position], metadata)
        self.keep_parsed([episode])
        return episode

    def keep_parsed(self, episodes: Iterable[Episode]) -> None:
        """Episodes kept parsed, least recently used out: those ``episode`` parses, and those read from
        Chroma for a snapshot past the full bound (it has no metadata to parse them from)."""
        with self._lock:
            for episode in episodes:
                self._episodes[episode.uuid] = episode
            while len(self._episodes) > PARSED_EPISODES_KEPT:
                self._episodes.popitem(last=False)

    def direction(self, record_id: str) -> np.ndarray | None:
        position = self.positions.get(record_id)
        return None if position is None or self.directions is None else self.directions[position]

    def derived(self, key: str, build: Callable[[], Any], size: Callable[[Any], int] | None = None) -> Any:
        """A structure built from this snapshot once (memory.readmodel.derived), kept with it and counted
        in its size."""
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

    def derived_items(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self._derived.items())

    def adopt(self, key: str, value: Any, nbytes: int) -> None:
        """A derived structure brought over from the snapshot this one was patched from (or from disk)."""
        with self._lock:
            self._derived[key] = value
            self._derived_bytes[key] = nbytes

    @property
    def total_bytes(self) -> int:
        return self.nbytes + sum(self._derived_bytes.values())


def columns_snapshot(
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
        ids=strings(ids),
        positions={record_id: position for position, record_id in enumerate(ids)},
        documents=strings(documents),
        kinds=kinds,
        session_codes=codes,
        session_names=list(session_index),
        timestamps=times,
        episode_ids=strings(episode_ids),
        message_ids=strings(message_ids),
        producers=strings(producers),
        produced_for=strings(produced_for),
        titles=strings(titles),
        config=None,
        sessions=[],
    )


def rows_bytes(snapshot: GroupSnapshot, positions: Iterable[int]) -> int:
    """What ``estimate_bytes`` counts for these rows (a patch adds and takes away only its rows')."""
    total = 0
    for p in positions:
        total += len(snapshot.ids[p]) + len(snapshot.documents[p]) + 2 * 56 + 8 * 6 + 13 + 8 * 2
        total += len(snapshot.message_ids[p]) + 56 if snapshot.message_ids[p] else 0
        total += len(snapshot.titles[p]) + 56 if snapshot.titles[p] else 0
        if snapshot.metadatas is not None:
            total += metadata_bytes(snapshot.metadatas[p])
        elif snapshot.episode_metadatas is not None and snapshot.ids[p] in snapshot.episode_metadatas:
            total += metadata_bytes(snapshot.episode_metadatas[snapshot.ids[p]])
        if snapshot.directions is not None and snapshot.directions.ndim == 2:
            total += 4 * snapshot.directions.shape[1]
    return total


def metadata_bytes(metadata: dict[str, Any]) -> int:
    return 232 + 32 * len(metadata) + sum(len(str(v)) for v in metadata.values())


def messages_bytes(messages: Iterable[Message]) -> int:
    return sum(600 + 2 * len(message.content) for message in messages)


def estimate_bytes(snapshot: GroupSnapshot) -> int:
    """Bytes held, estimated: strings by length, dictionaries by entries, arrays exactly."""
    strings = sum(len(text) + 56 for column in (snapshot.ids, snapshot.documents) for text in column)
    strings += 8 * 6 * len(snapshot)  # list slots of the other columns (their strings are shared or short)
    strings += sum(len(text) + 56 for text in snapshot.message_ids if text)
    strings += sum(len(text) + 56 for text in snapshot.titles if text)
    arrays = snapshot.kinds.nbytes + snapshot.session_codes.nbytes + snapshot.timestamps.nbytes
    positions = sys.getsizeof(snapshot.positions)
    full = 0
    if snapshot.metadatas is not None:
        full += sum(metadata_bytes(metadata) for metadata in snapshot.metadatas)
    if snapshot.episode_metadatas is not None:
        full += sum(metadata_bytes(metadata) for metadata in snapshot.episode_metadatas.values())
    if snapshot.directions is not None:
        full += snapshot.directions.nbytes
    if snapshot.messages:
        full += sum(600 + 2 * len(message.content) for message in snapshot.messages.values())
    return strings + arrays + positions + full
