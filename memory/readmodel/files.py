"""Read snapshots kept on disk between two runs of embedded Chroma, so that the first read of a big group
after a start does not read the whole group back from Chroma and tokenize it again.

The files live in ``<data folder>/read-snapshots/`` beside ``chroma/``, one per group, written when the
service closes from the snapshots its read model holds at the group's current version (columns, the
group's configuration and sessions; for a full snapshot also metadata, unit vectors and messages (the
vectors and messages alone for a group past the full bound that keeps them); and
the derived structures registered with the read model that can be saved: the keyword index's postings).

A file is never used when it could be stale. Embedded Chroma is written by one process per folder
(``memory.engine.folder_lock``), and that process follows this protocol:

- when its first read model that keeps its snapshots on disk (the service's) opens, it *claims* the folder:
  a ``read-snapshots.open/`` left by a process that did not close (a crash: its files may be behind its
  writes) is scrubbed, and ``read-snapshots/`` is renamed to ``read-snapshots.open/``. From then on, until
  the last one closes, no file is in ``read-snapshots/``: a crash leaves nothing a later start would trust;
- every write to a group's records scrubs the group's file *before* the write's version is counted:
  a reader that reads the version after it finds no file, a reader that read it before labels what it
  loads with the old version and patches or rebuilds it on its next read, as it does for data read from
  Chroma while a write lands. The files hear of writes from the connection's change feed
  (``memory.store.changes``) from the moment the process's first read model opens on the connection
  (``folder_files``; the groups it wrote before then are scrubbed at that moment): a process that writes
  a folder through epimem opens its read model first (the composition root does);
- when the last read model closes, it writes the current snapshots into ``read-snapshots.open/`` and renames
  that folder back. The files of groups this process did not write are still valid and stay.

On load, the file must also name the group and hold as many records as the group index counts (a
belt-and-braces check: a copy of epimem that did not follow the protocol, a file from another folder).

Erasure (docs/trust.md): a file is scrubbed (overwritten with zeros, synced, then removed) by the write
that makes it stale, a delete included, so no deleted text stays in a file once the delete returns;
a file written at close holds what the snapshot holds then, which a delete has already patched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memory.models import GroupConfiguration, Message, Role, SessionInfo
from memory.readmodel.reader import Derivation
from memory.readmodel.snapshot import GroupSnapshot, Version, estimate_bytes, strings
from memory.store.changes import ChangeFeed
from memory.store.connection import ChromaConnection

FOLDER = "read-snapshots"
CLAIMED = "read-snapshots.open"
FORMAT = 3  # 3: the vectors and messages kept without the metadata past the full bound
SUFFIX = ".snap"
Derivations = Mapping[str, Derivation[Any]]  # those registered with the read model, by key


def file_name(group_id: str) -> str:
    return hashlib.sha256(group_id.encode("utf-8", "surrogatepass")).hexdigest()[:40] + SUFFIX


def scrub(path: Path) -> None:
    """Overwrite a file with zeros, sync it, remove it (no byte of its text left in the folder)."""
    try:
        size = path.stat().st_size
        with path.open("r+b") as handle:
            handle.write(b"\0" * size)
            handle.flush()
            os.fsync(handle.fileno())
        path.unlink()
    except FileNotFoundError:
        return


def _text(values: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(values, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)


def _json(arrays: Any, key: str) -> Any:
    return json.loads(arrays[key].tobytes().decode("utf-8"))


class SnapshotFiles:
    """The persisted read snapshots of one embedded folder (one per connection: every read model of the
    process on that folder shares the claim; ``folder_files``)."""

    def __init__(self, data_folder: Path) -> None:
        self.folder = Path(data_folder) / FOLDER
        self.claimed = Path(data_folder) / CLAIMED
        self._lock = threading.Lock()
        self._users = 0
        self._loadable: set[str] = set()  # groups whose claimed file is still valid
        # Set by the read model that keeps its snapshots here: whether it would load a group's file now. A write
        # to such a group takes the file's bytes before it scrubs it (``take``): the first write after a start
        # does not throw away what the next read would load.
        self.wanted: Callable[[str], bool] | None = None
        self._taken: dict[str, bytes] = {}
        self.loads = self.writes = self.scrubs = 0

    # -- the claim ----------------------------------------------------------------------------------

    def open(self) -> None:
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
            if self.claimed.exists():  # a process that never closed: its files may be behind its writes
                for path in self.claimed.glob("*"):
                    scrub(path)
                shutil.rmtree(self.claimed, ignore_errors=True)
            if self.folder.exists():
                self.folder.rename(self.claimed)
            self.claimed.mkdir(parents=True, exist_ok=True)
            self._loadable = {path.name for path in self.claimed.glob("*" + SUFFIX)}

    def close(self, snapshots: list[GroupSnapshot], current: Callable[[str], int], derivations: Derivations) -> None:
        """Write the snapshots still at their group's current version; the last user gives the folder
        back (``read-snapshots/``)."""
        with self._lock:
            if self._users == 0:
                return
            for snapshot in snapshots:
                if snapshot.version[0] == current(snapshot.group_id) and snapshot.version[1] is None:
                    self._write(snapshot, derivations)
            self._users -= 1
            if self._users == 0:
                for path in self.claimed.glob("*"):
                    if path.name not in self._loadable:
                        scrub(path)
                self.claimed.rename(self.folder)
                _sync(self.folder.parent)
                self._loadable = set()

    # -- writes and reads ---------------------------------------------------------------------------

    def written(self, group_id: str) -> None:
        """A write to the group is about to be counted: its file is stale (scrubbed now)."""
        name = file_name(group_id)
        with self._lock:
            if self._users:
                if name in self._loadable:
                    self._loadable.discard(name)
                    if self.wanted is not None and self.wanted(group_id):
                        self._taken[group_id] = (self.claimed / name).read_bytes()
                    scrub(self.claimed / name)
                    self.scrubs += 1
            elif (self.folder / name).exists():  # no cache open: still never a stale file
                scrub(self.folder / name)
                self.scrubs += 1

    def load(self, group_id: str, version: Version, count: int, derivations: Derivations) -> GroupSnapshot | None:
        """The group's persisted snapshot labelled ``version`` (read before this call), or None when
        there is no valid file or it does not hold ``count`` records."""
        name = file_name(group_id)
        with self._lock:  # a write's scrub waits for the read (never a half-zeroed file)
            if name not in self._loadable:
                return None
            data = (self.claimed / name).read_bytes()
        return self._parsed(group_id, version, data, count, derivations)

    def take(self, group_id: str, version: Version, derivations: Derivations) -> GroupSnapshot | None:
        """The snapshot whose file a write just took (``wanted``) and scrubbed, labelled ``version``: the group's
        version before that write, which is not counted yet (the next read patches it in)."""
        with self._lock:
            data = self._taken.pop(group_id, None)
        return None if data is None else self._parsed(group_id, version, data, None, derivations)

    def _parsed(
        self, group_id: str, version: Version, data: bytes, count: int | None, derivations: Derivations
    ) -> GroupSnapshot | None:
        """``data`` read as the group's snapshot; None when it is of another format or group, or does not hold
        ``count`` records (None: taken from the file under the protocol, it is the group at ``version``)."""
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            loaded = {key: arrays[key] for key in arrays.files}
        meta = _json(loaded, "meta")
        if meta.get("format") != FORMAT or meta.get("group_id") != group_id:
            return None
        if count is not None and meta.get("count") != count:
            return None
        snapshot = _snapshot(group_id, version, loaded, meta)
        for key, derivation in derivations.items():
            prefix = f"d.{key}."
            found = {k[len(prefix) :]: v for k, v in loaded.items() if k.startswith(prefix)}
            restored = derivation.restored(snapshot, found) if found else None
            if restored is not None:
                snapshot.adopt(key, restored, derivation.size(restored))
        with self._lock:
            self.loads += 1
        return snapshot

    def _write(self, snapshot: GroupSnapshot, derivations: Derivations) -> None:
        # Only the sessions rows still name: a patched snapshot keeps the name of a session whose rows went.
        used, codes = np.unique(snapshot.session_codes, return_inverse=True)
        arrays: dict[str, np.ndarray] = {
            "meta": _text({"format": FORMAT, "group_id": snapshot.group_id, "count": len(snapshot)}),
            "ids": _text(snapshot.ids.tolist()),
            "documents": _text(snapshot.documents.tolist()),
            "kinds": snapshot.kinds,
            "session_codes": codes.astype(np.int32),
            "session_names": _text([snapshot.session_names[int(code)] for code in used]),
            "timestamps": snapshot.timestamps,
            "episode_ids": _text(snapshot.episode_ids.tolist()),
            "message_ids": _text(snapshot.message_ids.tolist()),
            "producers": _text(snapshot.producers.tolist()),
            "produced_for": _text(snapshot.produced_for.tolist()),
            "titles": _text(snapshot.titles.tolist()),
            "config": _text(snapshot.config.model_dump(mode="json") if snapshot.config is not None else None),
            "sessions": _text([info.model_dump(mode="json") for info in snapshot.sessions]),
        }
        if snapshot.full and snapshot.metadatas is not None:
            arrays["metadatas"] = _text(snapshot.metadatas)
        elif snapshot.episode_metadatas is not None:
            arrays["episode_metadatas"] = _text(snapshot.episode_metadatas)
        if snapshot.directions is not None:
            arrays["directions"] = snapshot.directions
            messages = snapshot.messages or {}
            arrays["messages"] = _text({key: _message_row(message) for key, message in messages.items()})
        for key, value in snapshot.derived_items():
            saved = derivations[key].saved(value) if key in derivations else None
            arrays.update({f"d.{key}.{name}": array for name, array in (saved or {}).items()})
        name = file_name(snapshot.group_id)
        temporary = self.claimed / (name + ".tmp")
        with temporary.open("wb") as handle:
            np.savez(handle, allow_pickle=False, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        if name in self._loadable:
            scrub(self.claimed / name)
        temporary.rename(self.claimed / name)
        self._loadable.add(name)
        self.writes += 1


_FOLDERS: weakref.WeakKeyDictionary[ChangeFeed, SnapshotFiles] = weakref.WeakKeyDictionary()
_FOLDERS_LOCK = threading.Lock()


def folder_files(connection: ChromaConnection) -> SnapshotFiles | None:
    """The kept snapshots of an embedded connection's folder (None with a Chroma server), one per connection.
    Made by the first read model on the connection: from then on the process's writes scrub the files of the
    groups they write (before they are counted), and the groups it wrote before are scrubbed now."""
    if connection.path is None:
        return None
    feed = connection.feed
    with _FOLDERS_LOCK:
        files = _FOLDERS.get(feed)
        if files is None:
            files = _FOLDERS[feed] = SnapshotFiles(connection.path.parent)
            feed.subscribe(files.written)
            for group_id in feed.written():
                files.written(group_id)
    return files


def _snapshot(group_id: str, version: Version, loaded: dict[str, np.ndarray], meta: dict[str, Any]) -> GroupSnapshot:
    interned: dict[str, str] = {}
    ids = strings(_json(loaded, "ids"))
    config = _json(loaded, "config")
    snapshot = GroupSnapshot(
        group_id=group_id,
        version=version,
        ids=ids,
        positions={record_id: position for position, record_id in enumerate(ids)},
        documents=strings(_json(loaded, "documents")),
        kinds=loaded["kinds"],
        session_codes=loaded["session_codes"],
        session_names=_json(loaded, "session_names"),
        timestamps=loaded["timestamps"],
        episode_ids=strings(_json(loaded, "episode_ids")),
        message_ids=strings(_json(loaded, "message_ids")),
        producers=strings(interned.setdefault(text, text) for text in _json(loaded, "producers")),
        produced_for=strings(interned.setdefault(text, text) for text in _json(loaded, "produced_for")),
        titles=strings(_json(loaded, "titles")),
        config=GroupConfiguration.model_validate(config) if config is not None else None,
        sessions=[SessionInfo.model_validate(info) for info in _json(loaded, "sessions")],
    )
    if "metadatas" in loaded:
        snapshot.full = True
        snapshot.metadatas = _json(loaded, "metadatas")
    if "directions" in loaded:
        snapshot.directions = np.array(loaded["directions"])  # writable, as a built one
        snapshot.messages = {key: _message(row) for key, row in _json(loaded, "messages").items()}
        if "episode_metadatas" in loaded:
            snapshot.episode_metadatas = _json(loaded, "episode_metadatas")
    snapshot.nbytes = estimate_bytes(snapshot)
    return snapshot


def _message_row(message: Message) -> list[Any]:
    return [
        message.id,
        message.role.value,
        message.content,
        message.timestamp.isoformat(),
        message.producer_id,
        message.produced_for_id,
        message.metadata,
    ]


def _message(row: list[Any]) -> Message:
    """A message written by ``_message_row`` (validated when it was stored: not again, which took most
    of a load's time)."""
    identifier, role, content, timestamp, producer, produced_for, metadata = row
    return Message.model_construct(
        id=identifier,
        role=Role(role),
        content=content,
        timestamp=datetime.fromisoformat(timestamp),
        producer_id=producer,
        produced_for_id=produced_for,
        metadata=metadata,
    )


def _sync(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
