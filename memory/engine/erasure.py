"""Erasure: after a delete, no byte of the deleted data stays in an embedded Chroma folder.

Measured with chromadb 1.5.9 (embedded, and ``chroma run`` on a folder): a delete answers from
Chroma's tables at once, but the bytes stay

- in the write log (table ``embeddings_queue`` of ``chroma.sqlite3``): every upsert of a record,
  and the delete itself, until the collection's vector index has been saved (every 1,000 writes);
  ``chroma vacuum --force`` leaves these rows;
- in SQLite free pages (``secure_delete`` is off, the file is never vacuumed) and in the segments
  of the full-text index (FTS5 keeps deleted terms until its segments are merged);
- in the vector index folders of dropped collections (no ``segments`` row points at them any
  more); their ``length.bin`` holds uninitialised memory, which can be any text the process held.

So erasure, with the engine alone (no other store call in flight):

1. rebuilds every live collection whose write log still names a deleted or overwritten record
   (and the collections the caller names): its live records (vectors, documents, metadata) are
   copied to ``<name>-rebuild``, the old collection is dropped and the copy renamed; the new write
   log holds only live records (a rebuild cut short is finished by ``StoreAdmin.finish_rebuilds``);
2. stops the engine, then in ``chroma.sqlite3``: deletes write-log rows of collections that no
   longer exist, merges the full-text index, turns ``secure_delete`` on and vacuums;
3. removes segment folders that no ``segments`` row names, and starts the engine again.

``erase_folder`` runs the same steps on a stopped Chroma server's folder (``epimem
erase-residue``). What is outside Chroma's files (file-system journals, freed disk blocks, SSD
wear levelling, backups) is out of reach of any of this.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sqlite3
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from chromadb.api import ClientAPI
from chromadb.config import Settings as ChromaSettings

log = logging.getLogger("epimem.erasure")

DATABASE = "chroma.sqlite3"
REBUILD_SUFFIX = "-rebuild"  # the suffix StoreAdmin.finish_rebuilds completes after a crash
_DELETE = 3  # embeddings_queue.operation of a delete (0 add, 1 update, 2 upsert, 3 delete)
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# Records (and collections) one call reads or writes: Chroma Cloud's quota (memory.store.quotas), which every
# Chroma call of epimem keeps, the embedded engine's upkeep too (the tests' cloud profile checks them all).
PAGE = 300
# What of a record's stored metadata says whether two writes of it are the same record (the store's record
# format knows: memory.store.codec.unstamped leaves out the time of the write).
SameRecord = Callable[[Mapping[str, Any]], Mapping[str, Any]]


@dataclass
class ErasureReport:
    """What one erasure did: collections rebuilt, write-log rows and segment folders removed,
    the database size before and after, and how long it took."""

    rebuilt: list[str] = field(default_factory=list)
    log_rows: int = 0
    folders: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    seconds: float = 0.0

    def add(self, other: ErasureReport) -> ErasureReport:
        """This report with another folder's added to it (one erasure over two folders)."""
        self.rebuilt += other.rebuilt
        self.log_rows += other.log_rows
        self.folders += other.folders
        self.bytes_before += other.bytes_before
        self.bytes_after += other.bytes_after
        self.seconds += other.seconds
        return self


def _open(folder: Path, *, read_only: bool = False) -> sqlite3.Connection:
    path = Path(folder) / DATABASE
    if read_only:
        return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    return sqlite3.connect(path, isolation_level=None)


# A message's vector record is written when the message is added (under its session's open episode) and names
# its episode when that forms (an update of this key alone, or the record written again whole): only this key
# moves, so that second write leaves nothing behind.
_MOVES_ON_FORMATION = "episode_id"


def residue_collections(folder: Path, same: SameRecord) -> list[str]:
    """Live collections whose write log still holds a delete or an overwritten record (one whose text
    or metadata changed, as ``same`` sees them; a message record that only moved from its open episode to its
    episode is not)."""
    if not (Path(folder) / DATABASE).exists():
        return []
    with _open(folder, read_only=True) as db:
        names = dict(db.execute("SELECT id, name FROM collections").fetchall())
        deleted = {
            topic
            for (topic,) in db.execute(
                "SELECT DISTINCT topic FROM embeddings_queue WHERE operation = ?", (_DELETE,)
            ).fetchall()
        }
        rewritten = db.execute(
            "SELECT q.topic, q.id, q.metadata FROM embeddings_queue q JOIN ("
            " SELECT topic, id FROM embeddings_queue GROUP BY topic, id HAVING COUNT(*) > 1"
            ") twice ON q.topic = twice.topic AND q.id = twice.id"
        ).fetchall()
    versions: dict[tuple[str, str], set[str]] = {}
    for topic, record_id, metadata in rewritten:
        kept = {k: v for k, v in same(json.loads(metadata or "{}")).items() if k != _MOVES_ON_FORMATION}
        if not kept:  # an update of the episode id alone (a formation naming a live message's episode)
            continue
        versions.setdefault((topic, record_id), set()).add(json.dumps(kept, sort_keys=True))
    changed = {topic for (topic, _), seen in versions.items() if len(seen) > 1}
    found = {names.get(_collection_id(topic)) for topic in deleted | changed}
    return sorted(name for name in found if name)


def _collection_id(topic: str) -> str:
    return topic.rsplit("/", 1)[-1]


def rebuild_collection(client: ClientAPI, name: str) -> None:
    """Replace a collection by a copy of its live records (same name, metadata and vectors)."""
    old = client.get_collection(name, embedding_function=None)
    temporary = f"{name}{REBUILD_SUFFIX}"
    if temporary in _collection_names(client):
        client.delete_collection(temporary)  # an earlier attempt that did not finish; the original is intact
    metadata = dict(old.metadata or {}) or None
    space = (old.configuration or {}).get("hnsw", {}) or {}
    configuration: Any = None
    if not (metadata and "hnsw:space" in metadata) and space.get("space"):
        configuration = {"hnsw": {"space": space["space"]}}
    new = client.create_collection(temporary, metadata=metadata, configuration=configuration, embedding_function=None)
    ids = _listed(lambda offset: old.get(limit=PAGE, offset=offset, include=[])["ids"])
    for start in range(0, len(ids), PAGE):
        _copy(new, old.get(ids=ids[start : start + PAGE], include=["embeddings", "documents", "metadatas"]))
    client.delete_collection(name)
    new.modify(name=name)


def _listed(page: Callable[[int], list[str]]) -> list[str]:
    """Everything ``page(offset)`` lists, PAGE at a time (nothing else uses the engine meanwhile: no entry moves)."""
    found: list[str] = []
    while True:
        entries = list(page(len(found)))
        found += entries
        if len(entries) < PAGE:
            return found


def _collection_names(client: ClientAPI) -> set[str]:
    return set(_listed(lambda offset: [c.name for c in client.list_collections(limit=PAGE, offset=offset)]))


def _copy(collection: Any, page: Any) -> None:
    ids = list(page["ids"])
    if not ids:
        return
    embeddings = page["embeddings"]
    documents = list(page["documents"] or [None] * len(ids))
    metadatas = [dict(m) if m else None for m in (page["metadatas"] or [None] * len(ids))]
    with_text = [i for i, d in enumerate(documents) if d is not None]
    without = [i for i, d in enumerate(documents) if d is None]
    for rows, text in ((with_text, True), (without, False)):
        if rows:
            collection.upsert(
                ids=[ids[i] for i in rows],
                embeddings=np.asarray([embeddings[i] for i in rows]),
                documents=[documents[i] for i in rows] if text else None,
                metadatas=[metadatas[i] for i in rows],
            )


def scrub_stopped(folder: Path) -> tuple[int, list[str]]:
    """With no engine on the folder: write-log rows of dropped collections, free pages and merged-away
    full-text terms, then orphaned segment folders. Returns (rows removed, folders removed)."""
    folder = Path(folder)
    if not (folder / DATABASE).exists():
        return 0, []
    db = _open(folder)
    try:
        live = {row[0] for row in db.execute("SELECT id FROM collections")}
        topics = [row[0] for row in db.execute("SELECT DISTINCT topic FROM embeddings_queue")]
        gone = [topic for topic in topics if _collection_id(topic) not in live]
        rows = 0
        for topic in gone:
            rows += db.execute("DELETE FROM embeddings_queue WHERE topic = ?", (topic,)).rowcount
        db.execute("PRAGMA secure_delete = ON")
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'embedding_fulltext_search'").fetchone():
            db.execute("INSERT INTO embedding_fulltext_search(embedding_fulltext_search) VALUES ('optimize')")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        segments = {row[0] for row in db.execute("SELECT id FROM segments")}
    finally:
        db.close()
    removed = []
    for child in sorted(folder.iterdir()):
        if not (child.is_dir() and _UUID.match(child.name)):
            continue
        if child.name in segments:
            zero_index_slack(child)
        else:
            shutil.rmtree(child)
            removed.append(child.name)
    return rows, removed


Stamp = tuple[int, ...]  # what a saved index's files looked like when their slack was zeroed


def zero_all_index_slack(
    folder: Path, seen: dict[str, Stamp] | None = None, *, names: Iterable[str] | None = None
) -> int:
    """Zero the unused capacity of every saved vector index of a folder whose engine has stopped (an
    index saved by a running process may carry stale memory, even deleted text, into it).

    ``seen`` (updated in place): the indexes zeroed before, with the stamp of their files then; an
    index whose files are unchanged since is skipped. Without it every engine restart rewrote the
    slack of every index of the folder (~165 KB per 20-vector partition: 1.6 GB per restart at
    10,000 partitions). ``names``: only the indexes of these collections (those the engine opened
    since it started: it saves no other), not a look at every index folder (three ``stat`` calls
    each: 11% of the time of creating partitions at 5,000 of them). Returns how many were zeroed."""
    done = 0
    found = Path(folder).iterdir() if Path(folder).is_dir() else iter(())
    if names is not None:
        found = (Path(folder) / segment for segment in _vector_segments(Path(folder), names))
    for child in found:
        if not (child.is_dir() and _UUID.match(child.name)):
            continue
        if seen is not None and child.name in seen and seen[child.name] == _stamp(child):
            continue  # zeroed before and not saved since
        done += zero_index_slack(child)
        if seen is not None:
            stamp = _stamp(child)  # after this write: the engine's next save changes it
            if stamp is not None:
                seen[child.name] = stamp
    return done


def _vector_segments(folder: Path, names: Iterable[str]) -> list[str]:
    """The vector index folders (segment ids) of the named collections."""
    wanted = sorted(set(names))
    if not wanted or not (folder / DATABASE).exists():
        return []
    found: list[str] = []
    with closing(_open(folder, read_only=True)) as db:
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            found += [
                segment
                for (segment,) in db.execute(
                    # one pass over segments (a join looked up segments per collection: 51 vs 3.5 ms at 10,000)
                    "SELECT id FROM segments WHERE scope = 'VECTOR' AND collection IN "
                    f"(SELECT id FROM collections WHERE name IN ({', '.join('?' * len(chunk))}))",
                    chunk,
                ).fetchall()
            ]
    return found


def _stamp(segment: Path) -> Stamp | None:
    """Inode, size and modification time of an index's data and length files; None if missing."""
    try:
        found = [(segment / name).stat() for name in ("data_level0.bin", "length.bin", "header.bin")]
    except OSError:
        return None
    return tuple(value for item in found for value in (item.st_ino, item.st_size, item.st_mtime_ns))


_HEADER = struct.Struct("<iQQQQ")  # version, offsetLevel0, max_elements, cur_element_count, size_data_per_element


def zero_index_slack(segment: Path) -> bool:
    """Zero the unused capacity of a saved HNSW index. hnswlib writes its whole preallocated
    buffers, and the slots past ``cur_element_count`` hold uninitialised memory, which can be any
    text the process held (measured: a deleted group's text in ``length.bin``). Nothing reads those
    slots. Returns False (and changes nothing) when the files do not have the expected layout."""
    header, data, lengths = segment / "header.bin", segment / "data_level0.bin", segment / "length.bin"
    if not (header.is_file() and data.is_file() and lengths.is_file()):
        return False
    raw = header.read_bytes()
    if len(raw) < _HEADER.size:
        return False
    _, _, capacity, count, per_element = _HEADER.unpack_from(raw)
    size = data.stat().st_size
    if not (per_element and count <= capacity and count * per_element <= size <= capacity * per_element):
        log.warning("unexpected HNSW layout in %s: unused capacity left as it is", segment)
        return False
    _zero_tail(data, count * per_element)
    if count * 4 <= lengths.stat().st_size <= capacity * 4:
        _zero_tail(lengths, count * 4)
    return True


def _zero_tail(path: Path, keep: int) -> None:
    size = path.stat().st_size
    if size > keep:
        with path.open("r+b") as file:
            file.seek(keep)
            file.write(bytes(size - keep))


def erase(
    client: ClientAPI,
    folder: Path,
    *,
    stop: Callable[[], None],
    start: Callable[[], ClientAPI],
    names: Iterable[str] = (),
    residue: SameRecord | None = None,
) -> tuple[ClientAPI, ErasureReport]:
    """Rebuild ``names`` that exist (and, with ``residue``, every collection whose write log holds a
    delete or an overwrite: ``residue_collections``), stop the engine, scrub the folder, start the engine
    again. The caller makes sure no other call uses the engine meanwhile. Returns the new client and the
    report."""
    began = time.perf_counter()
    report = ErasureReport(bytes_before=_size(folder))
    existing = _collection_names(client)
    found = set(residue_collections(folder, residue)) if residue is not None else set()
    wanted = sorted((found | set(names)) & existing)
    for name in wanted:
        if name.endswith(REBUILD_SUFFIX):
            continue  # a re-embedding in progress owns it
        rebuild_collection(client, name)
        report.rebuilt.append(name)
    stop()
    try:
        report.log_rows, report.folders = scrub_stopped(folder)
    finally:
        client = start()
    report.bytes_after = _size(folder)
    report.seconds = time.perf_counter() - began
    log.info(
        "erased: %d collections rebuilt, %d log rows, %d folders, %.2f s",
        len(report.rebuilt),
        report.log_rows,
        len(report.folders),
        report.seconds,
    )
    return client, report


def erase_folder(folder: Path, same: SameRecord) -> ErasureReport:
    """Erase the residue of a Chroma folder that no server or process has open (``epimem
    erase-residue``): the engine is started embedded on it for the rebuilds, then stopped. ``same``: as
    for ``residue_collections``."""
    from chromadb.api.shared_system_client import SharedSystemClient

    path = str(Path(folder).resolve())
    if not (Path(path) / DATABASE).exists():
        raise FileNotFoundError(f"no {DATABASE} in {path}: not a Chroma data folder")
    settings = ChromaSettings(anonymized_telemetry=False, is_persistent=True, persist_directory=path)

    def start() -> ClientAPI:
        return chromadb.PersistentClient(path=path, settings=settings)

    def stop() -> None:
        system = SharedSystemClient._identifier_to_system.pop(path, None)
        SharedSystemClient._identifier_to_refcount.pop(path, None)
        if system is not None:
            system.stop()

    _, report = erase(start(), Path(path), stop=stop, start=start, residue=same)
    stop()
    return report


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
