"""Collections read and written whole, as Chroma holds them, for backups (memory.lifecycle.backup).

A record is copied as it is stored — id, document, metadata (with the time stamp of its write) and
vector — whatever the record format, so a restored store reads back byte for byte what the source
read. Only live records are read: what a delete removed (and erased) is not in Chroma's answers. The
records keep the order Chroma lists them in, and are written back in that order.

Vectors of a cosine collection (partitions, group indexes) do not come back from Chroma exactly as they
were written (chromadb 1.5.9 keeps the unit vector and the norm and returns their product, one float32
rounding away from the input: 28% of unit vectors moved by an ulp in a test of 300). Written back
as read, a restored vector would move again, and scores would differ in their eighth digit. So a restore
writes, for each vector, one whose read-back is the backed-up vector (``writable``: Chroma's float32
arithmetic mirrored, a component moved an ulp at a time), and reads every vector back to check
(``StoreDump.write`` returns how many differ: 0 when Chroma computes as mirrored here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from memory.store import codec, versions
from memory.store.bounded import BoundedCollection
from memory.store.calls import StorePart, store_call
from memory.store.paging import PAGE, WRITE_BATCH


@dataclass(frozen=True)
class RawRecord:
    id: str
    document: str | None
    metadata: dict[str, Any]
    embedding: np.ndarray


class StoreDump(StorePart):
    @store_call
    def group_collections(self, group_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Name and metadata of every collection of the group (its log, index and partitions), by name."""
        found = []
        for collection in self._collections.listed():
            metadata = dict(collection.metadata or {})
            if "epimem" in metadata and metadata.get("group_id") == group_id:
                found.append((collection.name, metadata))
        return sorted(found)

    @store_call
    def record_ids(self, name: str) -> list[str]:
        """Every record id of a collection, in Chroma's order ([] when it does not exist)."""
        collection = self._collections.existing(name)
        return [] if collection is None else list(collection.get(include=[])["ids"])

    @store_call
    def read(self, name: str, ids: Sequence[str]) -> list[RawRecord]:
        """Up to ``PAGE`` records by id, in the order of ``ids``."""
        collection = self._collections.existing(name)
        if collection is None or not ids:
            return []
        # As stored: a long record's head and its pieces as the records they are (memory.store.parts), not joined.
        include = cast(Any, ["documents", "metadatas", "embeddings"])
        found: Any = BoundedCollection.get(collection, ids=list(ids), include=include)
        count = len(found["ids"])
        documents = found.get("documents") or [None] * count
        metadatas = found.get("metadatas") or [None] * count
        embeddings = found["embeddings"]
        records = {
            record_id: RawRecord(record_id, document, dict(metadata or {}), np.asarray(embeddings[i], dtype=np.float32))
            for i, (record_id, document, metadata) in enumerate(zip(found["ids"], documents, metadatas, strict=True))
        }
        return [records[record_id] for record_id in ids if record_id in records]

    @store_call
    def version(self, group_id: str) -> tuple[int, str | None]:
        """What moves with every write of the group: this process's counter and, with a Chroma server,
        the stamps of every server (memory.store.versions)."""
        shared = versions.shared_stamp(self._collections, group_id) if self.connection.shared else None
        return self.connection.feed.version(group_id), shared

    @store_call
    def holds_anything(self, group_id: str | None = None) -> bool:
        """Whether any epimem collection (of the group) or any registered group exists: a restore goes
        only into a store that holds none."""
        for collection in self._collections.listed():  # a group's collections name it (not the registry's)
            metadata = dict(collection.metadata or {})
            if "epimem" in metadata and "group_id" in metadata and group_id in (None, metadata["group_id"]):
                return True
        registry = self._collections.registry()
        if group_id is not None:
            return bool(registry.get(ids=[codec.registry_record_id(group_id)], include=[])["ids"])
        return registry.count() > 0

    @store_call
    def write(self, name: str, metadata: dict[str, Any], records: Sequence[RawRecord]) -> int:
        """Records into a collection (created with ``metadata`` if it does not exist), in their order;
        returns how many vectors do not read back as given (see the module notes)."""
        client = self.connection.client_for(name)
        self.connection.forget([name])
        collection = client.get_or_create_collection(name, metadata=metadata, embedding_function=None)
        if not records:
            return 0
        cosine = metadata.get("hnsw:space") == "cosine"
        wanted = np.stack([r.embedding for r in records])
        vectors = writable(wanted) if cosine else wanted
        for start in range(0, len(records), WRITE_BATCH):
            # Chroma takes documents for all or none of a call: a run with documents, one without.
            run: list[int] = []
            for index in range(start, min(start + WRITE_BATCH, len(records))):
                if run and (records[index].document is None) != (records[run[0]].document is None):
                    _add(collection, [records[i] for i in run], vectors[run])
                    run = []
                run.append(index)
            if run:
                _add(collection, [records[i] for i in run], vectors[run])
        return _differing(collection, [r.id for r in records], wanted)

    @store_call
    def restored(self, group_id: str) -> None:
        """The group registered, and its version moved (every reader reads it again)."""
        self._collections.registry().upsert(
            **codec.written([codec.registry_record_id(group_id)], [group_id], [{"group_id": group_id}]),
            embeddings=codec.placeholders(1),
        )
        versions.changed(self._collections, group_id)


def _add(collection: Any, records: Sequence[RawRecord], vectors: np.ndarray) -> None:
    columns: dict[str, Any] = {
        "ids": [r.id for r in records],
        "metadatas": [r.metadata or None for r in records],
        "embeddings": vectors,
    }
    if records[0].document is not None:
        columns["documents"] = [r.document for r in records]
    collection.add(**columns)


def _differing(collection: Any, ids: Sequence[str], wanted: np.ndarray) -> int:
    """How many of the records' vectors read back otherwise than ``wanted`` (rows in the order of ``ids``)."""
    differing = 0
    for start in range(0, len(ids), PAGE):
        page = list(ids[start : start + PAGE])
        found: Any = collection.get(ids=page, include=["embeddings"])
        got = dict(zip(found["ids"], np.asarray(found["embeddings"], dtype=np.float32), strict=True))
        differing += sum(
            1 for offset, record_id in enumerate(page) if not np.array_equal(got[record_id], wanted[start + offset])
        )
    return differing


def read_back(vectors: np.ndarray) -> np.ndarray:
    """What a cosine collection of chromadb 1.5.9 returns for these float32 rows: each row times the
    reciprocal of its norm (a sequential float32 sum of squares, plus 1e-30), times the norm."""
    rows = np.asarray(vectors, dtype=np.float32)
    squares = np.zeros(len(rows), dtype=np.float32)
    for column in range(rows.shape[1]):  # in order, as Chroma sums
        squares = (squares + rows[:, column] * rows[:, column]).astype(np.float32)
    norms = np.sqrt(squares).astype(np.float32)
    inverse = (np.float32(1) / (norms + np.float32(1e-30))).astype(np.float32)
    return ((rows * inverse[:, None]).astype(np.float32) * norms[:, None]).astype(np.float32)


def writable(wanted: np.ndarray, *, scales: int = 64, steps: int = 8) -> np.ndarray:
    """Rows whose ``read_back`` is ``wanted``: each wrong component is moved an ulp toward what it should
    read back as; a row that does not settle starts again from itself scaled by 1 ± k·2⁻²⁴. A row for which
    nothing is found is written as it is (``StoreDump.write`` counts it)."""
    target = np.asarray(wanted, dtype=np.float32)
    found = target.copy()
    todo = np.arange(len(target))
    for k in range(scales):
        for sign in (1.0, -1.0) if k else (1.0,):
            if not len(todo):
                return found
            rows = (target[todo] * np.float32(1 + sign * k * 2.0**-24)).astype(np.float32)
            for _ in range(steps):
                got = read_back(rows)
                wrong = got != target[todo]
                settled = ~wrong.any(axis=1)
                found[todo[settled]] = rows[settled]
                todo, rows, got, wrong = todo[~settled], rows[~settled], got[~settled], wrong[~settled]
                if not len(todo):
                    return found
                up = np.nextafter(rows, np.float32(np.inf))
                down = np.nextafter(rows, np.float32(-np.inf))
                rows = np.where(wrong, np.where(got < target[todo], up, down), rows).astype(np.float32)
    return found


__all__ = ["PAGE", "RawRecord", "StoreDump"]
