"""The read model's one interface: ``GroupReader``, one group as a reader sees it at one version.

What the read path asks of a group: its records as columns (``Columns``: every record of the group index, in
stored order), its nearest records to a vector, episodes by id (open episodes included), the messages of
episodes, unit vectors of records, the group's speakers, configuration and sessions, and the structures the
read path derives from it (``Derivation``: built once per version and kept with it). How much of the group is
in memory (everything, its vectors and messages without metadata, or its columns alone) is the read model's
business: a reader reads the rest from the store when asked, and keeps what it read for its own life (one
request).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np

from memory.models import Episode, GroupConfiguration, Message, SessionInfo
from memory.readmodel.patch import Patch
from memory.readmodel.snapshot import KIND_CODE, GroupSnapshot, Version
from memory.store.protocols import LogReader, VectorReader
from memory.store.records import EPISODE_KINDS, RecordFilter, VectorRecord, is_open_episode_id, message_record_id

__all__ = ["KIND_CODE", "Columns", "Derivation", "GroupReader", "unit"]  # KIND_CODE: the codes of Columns.kinds

T = TypeVar("T")


def unit(vector: np.ndarray) -> np.ndarray:
    """The vector over its norm, float32 (a zero vector stays zero)."""
    vector = np.asarray(vector, dtype=np.float32)
    return vector / (float(np.linalg.norm(vector)) or 1.0)


class Columns(Protocol):
    """Every record of the group index, one entry per record in stored order (whatever else is in memory)."""

    @property
    def group_id(self) -> str: ...
    @property
    def ids(self) -> np.ndarray: ...
    @property
    def positions(self) -> dict[str, int]: ...
    @property
    def documents(self) -> np.ndarray: ...
    @property
    def kinds(self) -> np.ndarray: ...  # int8 codes (memory.readmodel.snapshot.KIND_CODE)
    @property
    def session_codes(self) -> np.ndarray: ...  # int32, into session_names
    @property
    def session_names(self) -> list[str]: ...
    @property
    def session_index(self) -> dict[str, int]: ...
    @property
    def timestamps(self) -> np.ndarray: ...  # float64 epoch seconds
    @property
    def episode_ids(self) -> np.ndarray: ...
    @property
    def message_ids(self) -> np.ndarray: ...
    @property
    def producers(self) -> np.ndarray: ...
    @property
    def produced_for(self) -> np.ndarray: ...
    @property
    def titles(self) -> np.ndarray: ...

    def __len__(self) -> int: ...
    def record(self, position: int) -> VectorRecord: ...
    def record_by_id(self, record_id: str) -> VectorRecord | None: ...


class Derivation(Generic[T]):
    """A structure the read path builds from one version of a group and keeps with it (``GroupReader.
    derived``): the read model's extension point. ``key`` names it; ``build`` makes it. What a subclass
    overrides of the rest says what the read model does with it: ``size`` (bytes counted in the read model's
    bound), ``patched`` (carried to the next version when a write patched the group; None: built again when
    next asked), ``saved`` and ``restored`` (kept on disk with the group between runs of embedded Chroma). The
    read model patches, saves and restores the derivations registered with it (``ReadModel.register``)."""

    key: str = ""

    def build(self, group: GroupReader) -> T:
        raise NotImplementedError

    def size(self, value: T) -> int:
        return 0

    def patched(self, value: T, columns: Columns, patch: Patch, previous: Columns) -> T | None:
        return None

    def saved(self, value: T) -> dict[str, np.ndarray] | None:
        return None

    def restored(self, columns: Columns, arrays: dict[str, np.ndarray]) -> T | None:
        return None


class GroupReader:
    """One group at one version (``memory.readmodel.model.ReadModel.reader``): the version of the group's
    snapshot when the reader first needs it (one that only reads an episode by id needs none)."""

    def __init__(
        self,
        group_id: str,
        snapshot: Callable[[], GroupSnapshot],
        *,
        vectors: VectorReader,
        log: LogReader,
        grown: Callable[[], None],
        open_episodes: Derivation[dict[str, Episode]],
        speakers: Derivation[frozenset[str]],
    ) -> None:
        self.group_id = group_id
        self._take = snapshot
        self._vectors = vectors
        self._log = log
        self._grown = grown  # the group's copy grew by a derived structure: the read model applies its bounds
        self._open_episodes = open_episodes
        self._speakers = speakers
        self._read_vectors: dict[str, np.ndarray] = {}  # unit vectors ``vectors`` read from the store

    @functools.cached_property
    def _snapshot(self) -> GroupSnapshot:
        return self._take()

    @property
    def version(self) -> Version:
        return self._snapshot.version

    @property
    def columns(self) -> Columns:
        return self._snapshot

    @property
    def config(self) -> GroupConfiguration | None:
        return self._snapshot.config

    @property
    def sessions(self) -> list[SessionInfo]:
        return self._snapshot.sessions

    @property
    def whole(self) -> bool:
        """Whether every record's metadata and unit vector and the group's messages are in memory: a pass over
        the whole group reads nothing from the store."""
        return self._snapshot.full and self._snapshot.directions is not None

    def derived(self, derivation: Derivation[T]) -> T:
        built = not self._snapshot.has(derivation.key)
        value: T = self._snapshot.derived(derivation.key, lambda: derivation.build(self), derivation.size)
        if built and derivation.size(value):
            self._grown()
        return value

    def speakers(self) -> frozenset[str]:
        """The group's speakers (casefolded: a message's producer id, else its role)."""
        return self.derived(self._speakers)

    def nearest(self, vector: np.ndarray, *, k: int, selection: RecordFilter | None) -> list[tuple[str, float]]:
        """Ids and cosine distances of the store's ``k`` nearest records (some may be newer than this reader's
        version: ``columns.record_by_id`` knows them or not)."""
        return self._vectors.nearest(self.group_id, vector, k=k, selection=selection)

    # -- episodes -------------------------------------------------------------------------------------------

    def open_episodes(self) -> dict[str, Episode]:
        """Each session's pending messages as its open episode (memory.readmodel.open_episodes), by id."""
        return self.derived(self._open_episodes)

    def episodes(self, episode_ids: Sequence[str]) -> dict[str, Episode]:
        """Episodes and summaries by id (open episodes included); those not found are left out."""
        opened: dict[str, Episode] = {}
        if any(is_open_episode_id(e) for e in episode_ids):
            kept_open = self.open_episodes()
            opened = {e: kept_open[e] for e in episode_ids if e in kept_open}
            episode_ids = [e for e in episode_ids if not is_open_episode_id(e)]
        if not episode_ids:
            return opened
        snapshot = self._snapshot
        if snapshot.holds_episodes:
            return opened | {e: parsed for e in episode_ids if (parsed := snapshot.episode(e)) is not None}
        kept = {e: parsed for e in episode_ids if (parsed := snapshot.episode(e)) is not None}
        missing = [e for e in episode_ids if e not in kept]
        read = self._vectors.episodes(self.group_id, ids=missing) if missing else []
        snapshot.keep_parsed(read)
        return opened | kept | {e.uuid: e for e in read if e.uuid in missing}

    def episode(self, session_id: str, episode_id: str) -> Episode | None:
        """An episode or summary of one session by id, as stored now (or the session's open episode)."""
        if is_open_episode_id(episode_id):
            opened = self.open_episodes().get(episode_id)
            return opened if opened is not None and opened.session_id == session_id else None
        selection = RecordFilter(session_ids=(session_id,), kinds=EPISODE_KINDS)
        found = self._vectors.episodes(self.group_id, ids=[episode_id], selection=selection)
        return found[0] if found else None

    # -- messages -------------------------------------------------------------------------------------------

    def session_messages(self, wanted: Mapping[str, Sequence[str]]) -> dict[str, dict[str, Message]]:
        """Messages by session and id (those the log holds)."""
        kept = self._snapshot.messages
        if kept is not None:
            return {
                session: {i: m for i in ids if (m := kept.get(message_record_id(session, i))) is not None}
                for session, ids in wanted.items()
            }
        stored = self._log.get_messages_of_sessions(self.group_id, wanted)
        return {
            session: {i: stored[session][i].message for i in ids if i in stored.get(session, {})}
            for session, ids in wanted.items()
        }

    def messages(self, episodes: Sequence[Episode]) -> dict[str, list[Message]]:
        """Each episode's source messages (those the log holds) in event-time order, by episode id."""
        if not episodes:
            return {}
        wanted: dict[str, list[str]] = defaultdict(list)
        for episode in episodes:
            wanted[episode.session_id] += episode.source_message_ids
        found = self.session_messages(wanted)
        return {
            episode.uuid: sorted(
                (m for i in episode.source_message_ids if (m := found[episode.session_id].get(i)) is not None),
                key=lambda message: message.timestamp,
            )
            for episode in episodes
        }

    def source_messages(self, episode: Episode) -> list[Message]:
        """An episode's messages; a summary's are those of the episodes it compacts."""
        if episode.source_episode_ids:
            sources = self.episodes(list(episode.source_episode_ids)).values()
            found = [m for source in sources if not source.source_episode_ids for m in self.source_messages(source)]
            return sorted(found, key=lambda message: message.timestamp)
        return self.messages([episode]).get(episode.uuid, [])

    # -- vectors --------------------------------------------------------------------------------------------

    def vectors(self, record_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Unit vectors of records by id (those found)."""
        snapshot = self._snapshot
        if snapshot.directions is not None:
            return {i: vector for i in record_ids if (vector := snapshot.direction(i)) is not None}
        missing = [i for i in record_ids if i not in self._read_vectors]
        if missing:
            read = self._vectors.embeddings(self.group_id, missing)
            self._read_vectors |= {i: unit(vector) for i, vector in read.items()}
        return {i: self._read_vectors[i] for i in record_ids if i in self._read_vectors}

    def vector_rows(
        self, episode_ids: Sequence[str], record_ids: Sequence[str]
    ) -> tuple[np.ndarray, Mapping[str, int]]:
        """A matrix of unit vectors and the row of each of these episodes and records that has one (the rows
        of other records may be there too)."""
        snapshot = self._snapshot
        if snapshot.full and snapshot.directions is not None:
            return snapshot.directions, snapshot.positions
        if snapshot.directions is not None:
            present = [(i, p) for i in [*episode_ids, *record_ids] if (p := snapshot.positions.get(i)) is not None]
            rows = {record_id: row for row, (record_id, _) in enumerate(present)}
            return snapshot.directions[[p for _, p in present]], rows
        known = {e: self._read_vectors[e] for e in episode_ids if e in self._read_vectors}
        wanted = [e for e in episode_ids if e not in known] + list(record_ids)
        read = self._vectors.embeddings(self.group_id, wanted)
        vectors = known | {record_id: unit(vector) for record_id, vector in read.items()}
        matrix = np.stack(list(vectors.values())) if vectors else np.zeros((0, 0), dtype=np.float32)
        return matrix, {record_id: row for row, record_id in enumerate(vectors)}
