"""Vectors: every record is written to its session's partition and to the group index, read from the
partition when one session is asked for and from the index otherwise."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from memory.models import Episode
from memory.store import codec, versions
from memory.store.calls import StorePart, store_call
from memory.store.changes import Change
from memory.store.paging import WRITE_BATCH, pages
from memory.store.parts import RecordCollection
from memory.store.protocols import Ids, Selection
from memory.store.quotas import RESULTS_PER_READ
from memory.store.record_format import PARTS_KEY
from memory.store.records import EPISODE_KINDS, RecordFilter, VectorHit, VectorRecord


def _columns(records: Sequence[VectorRecord], *, overwrite: bool = False) -> dict[str, Any]:
    embeddings = [record.embedding for record in records if record.embedding is not None]
    if len(embeddings) != len(records):
        raise ValueError("every vector record needs its embedding")
    return {
        **codec.written(
            [r.id for r in records], [r.document for r in records], [r.metadata for r in records], overwrite=overwrite
        ),
        "embeddings": np.stack(embeddings),
    }


class VectorStore(StorePart):
    def _both(self, group_id: str, session_id: str, *, create: bool) -> list[RecordCollection]:
        """The session's partition and the group index (those that exist, unless created)."""
        found = (
            self._collections.vectors(group_id, session_id, create=create),
            self._collections.vectors(group_id, create=create),
        )
        return [collection for collection in found if collection is not None]

    def _read_from(self, group_id: str, selection: RecordFilter | None) -> tuple[RecordCollection | None, Any]:
        session = selection.single_session if selection is not None else None
        collection = self._collections.vectors(group_id, session)
        return collection, codec.vector_where(selection, partition=session is not None)

    @store_call
    def upsert(self, group_id: str, session_id: str, records: Sequence[VectorRecord], *, new: bool = False) -> None:
        """Write to the partition first, then the group index (both idempotent by id); the write is
        published (memory.store.changes). ``new``: records the group does not hold yet
        (kept for callers; the patch finds out itself)."""
        if not records:
            return
        columns = _columns(records)
        for collection in self._both(group_id, session_id, create=True):
            collection.upsert(**columns)
        versions.changed(self._collections, group_id, change=Change(records=tuple(records)))

    @store_call
    def upsert_sessions(self, group_id: str, records: Mapping[str, Sequence[VectorRecord]]) -> None:
        """Several partitions of one group: each partition written, then the group index once for
        all of them (fewer, larger writes than ``upsert`` per session; idempotent by id)."""
        batches = {session: list(found) for session, found in records.items() if found}
        if not batches:
            return
        for session_id, found in batches.items():
            partition = self._collections.vectors(group_id, session_id, create=True)
            assert partition is not None
            partition.upsert(**_columns(found))
        index = self._collections.vectors(group_id, create=True)
        assert index is not None
        everything = [record for found in batches.values() for record in found]
        for start in range(0, len(everything), WRITE_BATCH):
            index.upsert(**_columns(everything[start : start + WRITE_BATCH]))
        versions.changed(self._collections, group_id, change=Change(records=tuple(everything)))

    @store_call
    def replace(self, group_id: str, session_id: str, record: VectorRecord) -> None:
        """Overwrite a record (upsert merges metadata: keys the new record lacks are removed). The pieces of the
        version it replaces (memory.store.parts) go once the partition and the index both hold the new one."""
        partition = self._collections.vectors(group_id, session_id)
        current = partition.get(ids=[record.id], include=["metadatas"])["metadatas"] if partition is not None else None
        columns = _columns([record], overwrite=True)
        stale = sorted(set((current or [{}])[0] or {}) - set(columns["metadatas"][0]) - {PARTS_KEY})
        both = self._both(group_id, session_id, create=True)
        replaced: set[str] = set()
        for collection in both:
            replaced.update(collection.rewrite(**columns, later=True))  # (the two records share their pieces)
            if stale:  # a key updated to None is removed
                collection.update(ids=[record.id], metadatas=cast(Any, [dict.fromkeys(stale)]))
        both[0].remove_pieces(sorted(replaced))
        versions.changed(self._collections, group_id, change=Change(records=(record,), merge=False))

    @store_call
    def update_metadata(
        self, group_id: str, session_id: str, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]
    ) -> None:
        """Merge metadata into records; a key set to None is removed (Chroma's update semantics). Only
        keys of their own can be (codec.PACKED ones are written with the record)."""
        packed = {key for metadata in metadatas for key in metadata} & codec.PACKED
        if packed:
            raise ValueError(f"packed metadata keys are not updated in place: {sorted(packed)}")
        if ids:
            for collection in self._both(group_id, session_id, create=False):
                collection.update(ids=list(ids), metadatas=cast(Any, list(metadatas)))
            updates = tuple(zip(ids, (dict(m) for m in metadatas), strict=True))
            versions.changed(self._collections, group_id, change=Change(updates=updates))

    @store_call
    def delete(self, group_id: str, session_id: str, ids: Sequence[str]) -> tuple[int, list[str]]:
        """Remove records from the partition and the index: (vectors removed, their ids)."""
        removed: list[str] = []
        if ids:
            for collection in self._both(group_id, session_id, create=False):
                removed += self._collections.remove(collection, ids)
            versions.changed(self._collections, group_id, change=Change(removed=tuple(ids)))
        return len(removed), removed

    @store_call
    def records(
        self, group_id: str, *, ids: Ids = None, selection: Selection = None, embeddings: bool = False
    ) -> list[VectorRecord]:
        """Records by id and/or filter, with their stored embeddings when asked."""
        collection, where = self._read_from(group_id, selection)
        if collection is None or (ids is not None and not ids):
            return []  # Chroma refuses an empty id list
        include: list[Any] = ["documents", "metadatas"] + (["embeddings"] if embeddings else [])
        read: Iterable[Any]
        if ids is not None:
            read = [collection.get(include=include, where=where, ids=list(ids))]
        else:
            read = pages(collection, include, where=where)
        found: list[VectorRecord] = []
        for page in read:
            vectors = page.get("embeddings")
            for position, (record_id, text, metadata) in enumerate(codec.rows_of(page)):
                found.append(
                    VectorRecord(
                        id=record_id,
                        document=text,
                        metadata=metadata,
                        embedding=np.asarray(vectors[position], dtype=np.float32) if vectors is not None else None,
                    )
                )
        return found

    @store_call
    def embeddings(self, group_id: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of records by id (those found), and nothing else of them: a read of the
        embeddings alone is about a quarter of one that also brings documents and metadata."""
        collection, _ = self._read_from(group_id, None)
        if collection is None or not ids:
            return {}
        found = collection.get(ids=list(ids), include=cast(Any, ["embeddings"]))
        vectors = found.get("embeddings")
        if vectors is None:
            return {}
        return {record_id: np.asarray(vectors[i], dtype=np.float32) for i, record_id in enumerate(found["ids"])}

    @store_call
    def episodes(self, group_id: str, *, ids: Ids = None, selection: Selection = None) -> list[Episode]:
        """The episodes and summaries among the records by id and/or filter."""
        collection, where = self._read_from(group_id, selection)
        if collection is None or (ids is not None and not ids):
            return []
        if ids is not None:
            page = collection.get(ids=list(ids), where=where, include=["documents", "metadatas"])
            found = [(text, metadata) for _, text, metadata in codec.rows_of(page)]
        else:
            found = [(document, metadata) for _, document, metadata in self._collections.rows(collection, where=where)]
        return [codec.episode_from_record(d, m) for d, m in found if m.get("kind") in EPISODE_KINDS]

    @store_call
    def count(self, group_id: str) -> int:
        """Vectors in the group (its index)."""
        index = self._collections.vectors(group_id)
        return index.count() if index is not None else 0

    @store_call
    def query(self, group_id: str, vector: np.ndarray, *, k: int, selection: Selection = None) -> list[VectorHit]:
        """The ``k`` nearest records (at most RESULTS_PER_READ, Chroma Cloud's quota), in one partition (a
        filter of one session) or in the group index."""
        collection, where = self._read_from(group_id, selection)
        if collection is None:
            return []
        result = collection.query(
            query_embeddings=[vector],
            n_results=min(k, RESULTS_PER_READ),
            where=where,
            include=["documents", "metadatas", "distances"],
        )
        ids = result["ids"][0]
        documents = (result["documents"] or [[]])[0]
        metadatas = (result["metadatas"] or [[]])[0]
        distances = (result["distances"] or [[]])[0]
        return [
            VectorHit(VectorRecord(i, *codec.read_back(d, m)), float(distance))
            for i, d, m, distance in zip(ids, documents, metadatas, distances, strict=True)
        ]

    @store_call
    def nearest(
        self, group_id: str, vector: np.ndarray, *, k: int, selection: Selection = None
    ) -> list[tuple[str, float]]:
        """Ids and cosine distances of the ``k`` nearest records, at most RESULTS_PER_READ (``query`` without
        documents and metadata: the read model has those)."""
        collection, where = self._read_from(group_id, selection)
        if collection is None:
            return []
        result = collection.query(
            query_embeddings=[vector], n_results=min(k, RESULTS_PER_READ), where=where, include=["distances"]
        )
        distances = (result["distances"] or [[]])[0]
        return [(i, float(d)) for i, d in zip(result["ids"][0], distances, strict=True)]
