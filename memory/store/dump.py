"""Collections read and written whole, as Chroma holds them, for backups (memory.lifecycle.backup).

A record is copied as it is stored — id, document, metadata (with the time stamp of its write) and
vector — whatever the record format, so a restored store reads back byte for byte what the source
read. Only live records are read: what a delete removed (and erased) is not in Chroma's answers. The
records keep the order Chroma lists them in, and are written back in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from memory.store import codec, versions
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
        found: Any = collection.get(ids=list(ids), include=cast(Any, ["documents", "metadatas", "embeddings"]))
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
        return versions.local(self._collections, group_id), shared

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
    def write(self, name: str, metadata: dict[str, Any], records: Sequence[RawRecord]) -> None:
        """Records into a collection (created with ``metadata`` if it does not exist), in their order."""
        client = self.connection.client_for(name)
        self.connection.forget([name])
        collection = client.get_or_create_collection(name, metadata=metadata, embedding_function=None)
        for start in range(0, len(records), WRITE_BATCH):
            batch = records[start : start + WRITE_BATCH]
            # Chroma takes documents for all or none of a call: a run with documents, one without.
            run: list[RawRecord] = []
            for record in batch:
                if run and (record.document is None) != (run[0].document is None):
                    _add(collection, run)
                    run = []
                run.append(record)
            if run:
                _add(collection, run)

    @store_call
    def restored(self, group_id: str) -> None:
        """The group registered, and its version moved (every reader reads it again)."""
        self._collections.registry().upsert(
            **codec.written([codec.registry_record_id(group_id)], [group_id], [{"group_id": group_id}]),
            embeddings=codec.placeholders(1),
        )
        versions.changed(self._collections, group_id)


def _add(collection: Any, records: Sequence[RawRecord]) -> None:
    columns: dict[str, Any] = {
        "ids": [r.id for r in records],
        "metadatas": [r.metadata or None for r in records],
        "embeddings": np.stack([r.embedding for r in records]),
    }
    if records[0].document is not None:
        columns["documents"] = [r.document for r in records]
    collection.add(**columns)


__all__ = ["PAGE", "RawRecord", "StoreDump"]
