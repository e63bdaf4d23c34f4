"""Whole-collection operations: dropping a session's or a group's records, listing and rebuilding
collections (re-embedding), erasing what deletes left on disk, and the connection's health."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np

from memory.engine.erasure import ErasureReport
from memory.receipts import DeletionReceipt
from memory.store import codec, versions
from memory.store.calls import StorePart, store_call
from memory.store.paging import WRITE_BATCH
from memory.store.records import VectorRecord


class StoreAdmin(StorePart):
    @store_call
    def heartbeat(self) -> None:
        self._collections.client.heartbeat()

    # -- dropping scopes ------------------------------------------------------------------------

    def _drop_into(self, receipt: DeletionReceipt, name: str, *, log: bool = False) -> None:
        dropped = self._collections.drop(name)
        if dropped >= 0:
            receipt.collections.append(name)
            if log:
                receipt.log_records += dropped
            else:
                receipt.vectors += dropped

    @store_call
    def drop_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        """The session's partition, its records in the group index and in the group log."""
        receipt = DeletionReceipt()
        self._drop_into(receipt, codec.partition_name(group_id, session_id))
        index = self._collections.vectors(group_id)
        if index is not None:
            removed = self._collections.remove_where(index, {"session_id": session_id})
            receipt.vectors += len(removed)
            receipt.ids += removed
        log = self._collections.log(group_id, create=False)
        if log is not None:
            removed = self._collections.remove_where(log, {"session_id": session_id})
            receipt.log_records += len(removed)
            receipt.ids += removed
        versions.changed(self._collections, group_id)
        return receipt

    @store_call
    def drop_group(self, group_id: str) -> DeletionReceipt:
        """Every collection of the group (and whatever else names it), and its registry entry."""
        receipt = DeletionReceipt()
        log = self._collections.log(group_id, create=False)
        sessions: set[str] = set()
        if log is not None:
            found = log.get(where=cast(Any, {"kind": {"$in": ["message", "session"]}}), include=["metadatas"])
            sessions = {str((meta or {})["session_id"]) for meta in found["metadatas"] or []}
        for session_id in sorted(sessions):
            self._drop_into(receipt, codec.partition_name(group_id, session_id))
        self._drop_into(receipt, codec.index_name(group_id))
        self._drop_into(receipt, codec.log_name(group_id), log=True)
        # Whatever else still names the group (a partition no record lists, the group's summary
        # partition, a re-embedding left half-way) goes too.
        for name, _ in self._epimem_collections(group_id):
            self._drop_into(receipt, name)
        self._collections.remove(self._collections.registry(), [codec.registry_record_id(group_id)])
        versions.changed(self._collections, group_id, stamp=False)  # the shared stamp went with the record
        return receipt

    @store_call
    def drop_log_if_empty(self, group_id: str) -> bool:
        """Drop a group's log that holds nothing (e.g. re-created only by a lease release after a delete)."""
        log = self._collections.log(group_id, create=False)
        if log is None or log.count():
            return False
        return self._collections.drop(codec.log_name(group_id)) >= 0

    # -- listing and rebuilding -------------------------------------------------------------------

    def _epimem_collections(self, group_id: str | None) -> list[tuple[str, dict[str, Any]]]:
        """Name and metadata of epimem's collections (of one group), the group id in full where the metadata
        holds its digest (a group id longer than a collection metadata value: codec.collection_value)."""
        found = []
        for collection in self._collections.listed():
            metadata = dict(collection.metadata or {})
            recorded = metadata.get("group_id")
            if "epimem" not in metadata or (group_id is not None and not codec.same_value(recorded, group_id)):
                continue
            found.append((collection.name, metadata))
        hashed = {codec.hashed_group(m.get("group_id")) for _, m in found} - {None}
        if hashed:
            groups = {codec.registry_record_id(g): g for g in self._group_ids(sorted(str(h) for h in hashed))}
            for _, metadata in found:
                digest = codec.hashed_group(metadata.get("group_id"))
                if digest in groups:
                    metadata["group_id"] = groups[digest]
        return sorted(found)

    def _group_ids(self, record_ids: list[str]) -> list[str]:
        """The group ids of registry records by id (their text)."""
        found = self._collections.registry().get(ids=record_ids, include=["documents", "metadatas"])
        return [text for _, text, _ in codec.rows_of(found)]

    @store_call
    def collection_names(self) -> list[str]:
        return sorted(collection.name for collection in self._collections.listed())

    @store_call
    def epimem_collections(self, group_id: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Name and metadata of every epimem collection (of one group), read without the model check."""
        return self._epimem_collections(group_id)

    @store_call
    def read_collection(self, name: str) -> list[VectorRecord]:
        """Every record of a collection (without embeddings and without the model check)."""
        collection = self._collections.existing(name)
        if collection is None:
            return []
        return [VectorRecord(i, document, metadata) for i, document, metadata in self._collections.rows(collection)]

    @store_call
    def rebuild_collection(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Replace a collection by one built with the current model (an explicit re-embed only).

        The new vectors go to ``<name>-rebuild`` first; only when it is complete is the old
        collection dropped and the new one renamed, so an interruption never loses the records
        (``finish_rebuilds`` completes a rename that was cut short).
        """
        client = self.connection.client_for(name)
        old = self._collections.wrap(client.get_collection(name, embedding_function=None))
        metadata = {**(old.metadata or {}), "epimem_model": codec.collection_value(self.model_id)}
        temporary = f"{name}-rebuild"
        self._drop_rebuild(temporary)  # an earlier attempt that did not finish; the original is intact
        new = self._collections.wrap(client.create_collection(temporary, metadata=metadata, embedding_function=None))
        for start in range(0, len(records), WRITE_BATCH):
            batch = records[start : start + WRITE_BATCH]
            new.upsert(
                **codec.written([r.id for r in batch], [r.document for r in batch], [r.metadata for r in batch]),
                embeddings=np.stack([cast(np.ndarray, record.embedding) for record in batch]),
            )
        pieces = set(old.all_pieces()) - set(new.all_pieces())  # (a record rebuilt unchanged keeps its pieces)
        self._collections.drop(name)
        new.modify(name=name)
        new.remove_pieces(sorted(pieces))
        group = next((str(r.metadata["group_id"]) for r in records if "group_id" in r.metadata), None)
        if group is not None:
            versions.changed(self._collections, group)

    def _drop_rebuild(self, name: str) -> None:
        """Drop a rebuild's collection and the pieces of its records (those its original does not share)."""
        found = self._collections.existing(name)
        if found is not None:
            original = self._collections.existing(name.removesuffix("-rebuild"))
            pieces = set(found.all_pieces()) - set(original.all_pieces() if original is not None else [])
            self._collections.drop(name)
            found.remove_pieces(sorted(pieces))

    @store_call
    def finish_rebuilds(self) -> list[str]:
        """Complete rebuilds whose rename was interrupted; drop rebuilds whose original still exists."""
        names = {collection.name for collection in self._collections.listed()}
        finished = []
        for temporary in sorted(name for name in names if name.endswith("-rebuild")):
            original = temporary.removesuffix("-rebuild")
            if original in names:
                self._drop_rebuild(temporary)
            else:
                self.connection.forget([original])
                renamed = self.connection.client_for(temporary).get_collection(temporary, embedding_function=None)
                renamed.modify(name=original)
                finished.append(original)
                if "group_id" in (renamed.metadata or {}):
                    versions.changed(self._collections, str((renamed.metadata or {})["group_id"]))
        return finished

    # -- handles and erasure ------------------------------------------------------------------------

    @property
    def open_collections(self) -> int:
        return len(self.connection.cached())

    def forget_handles(self, names: Iterable[str] | None = None) -> None:
        """Drop cached collection handles (all of them, or the named ones)."""
        self.connection.forget(names)

    def erase(self, group_id: str, session_ids: Iterable[str], *, group_deleted: bool = False) -> ErasureReport | None:
        """Erase the bytes a delete left in an embedded folder (memory.engine.erasure): the collections of
        the group that had records deleted or rewritten (its index and log, or the registry after a
        group delete, and the named sessions' partitions) are rebuilt, the folder scrubbed. Nothing
        with a Chroma server (``epimem erase-residue`` cleans a stopped server's folder)."""
        names = [codec.REGISTRY] if group_deleted else [codec.index_name(group_id), codec.log_name(group_id)]
        names += [codec.partition_name(group_id, session_id) for session_id in session_ids]
        return self.connection.erase(names)
