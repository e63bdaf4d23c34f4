"""Opening epimem's collections: cached handles, the embedding-model check, paged reads, drops.

Partitions and the group index record the embedding model that built them; opening them with
another model is refused (``ModelMismatchError``). Collections are never deleted or recreated to
recover from an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import chromadb
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from memory.errors import ModelMismatchError
from memory.store import codec
from memory.store.connection import ChromaConnection
from memory.store.paging import pages
from memory.store.records import Row


class Collections:
    """The collections of one connection, opened for one embedding model."""

    def __init__(self, connection: ChromaConnection, model_id: str) -> None:
        self.connection = connection
        self.model_id = model_id

    @property
    def client(self) -> ClientAPI:
        return self.connection.client

    def open(self, name: str, *, metadata: dict[str, Any], create: bool = True) -> Collection | None:
        def open_(client: ClientAPI) -> Collection | None:
            if create:
                return client.get_or_create_collection(name, metadata=metadata, embedding_function=None)
            return self.existing(name)

        collection = self.connection.handle(name, open_)
        if collection is None:
            return None
        recorded = (collection.metadata or {}).get("epimem_model")
        if recorded is not None and recorded != metadata.get("epimem_model", recorded):
            self.connection.forget([name])
            raise ModelMismatchError(
                f"collection {name} was built with embedding model {recorded!r}, "
                f"not {self.model_id!r}; run `epimem reembed` to rebuild its vectors",
                details={"recorded": recorded, "configured": self.model_id},
            )
        return collection

    def listed(self) -> list[Collection]:
        """Every collection of every engine (memory.store.connection)."""
        return [found for engine in self.connection.engines for found in engine.client.list_collections()]

    def existing(self, name: str) -> Collection | None:
        """A collection by name without the model check, or None."""
        try:
            return self.connection.client_for(name).get_collection(name, embedding_function=None)
        except (chromadb.errors.NotFoundError, ValueError):
            return None

    def registry(self) -> Collection:
        collection = self.open(codec.REGISTRY, metadata={"epimem": "registry"})
        assert collection is not None
        return collection

    def log(self, group_id: str, *, create: bool = True) -> Collection | None:
        metadata = {"epimem": "log", "group_id": group_id}
        return self.open(codec.log_name(group_id), metadata=metadata, create=create)

    def written_log(self, group_id: str) -> Collection:
        """The group's log, created if needed (for writes)."""
        log = self.log(group_id)
        assert log is not None
        return log

    def vectors(self, group_id: str, session_id: str | None = None, *, create: bool = False) -> Collection | None:
        """A session's partition, or the group index when ``session_id`` is None."""
        if session_id is None:
            name, kind = codec.index_name(group_id), "index"
        else:
            name, kind = codec.partition_name(group_id, session_id), "partition"
        metadata = codec.vector_collection_metadata(kind, group_id, session_id, self.model_id)
        return self.open(name, metadata=metadata, create=create)

    def rows(self, collection: Collection, **kwargs: Any) -> Iterator[Row]:
        """Every record (id, document, metadata) matching ``kwargs`` (e.g. ``where``), page by page."""
        for page in pages(collection, ["documents", "metadatas"], **kwargs):
            yield from codec.rows_of(page)

    @staticmethod
    def remove(collection: Collection, ids: Iterable[str]) -> list[str]:
        """Delete the records of ``ids`` that exist; returns their ids."""
        wanted = list(ids)
        if not wanted:
            return []
        existing = collection.get(ids=wanted, include=[])["ids"]
        if existing:
            collection.delete(ids=existing)
        return list(existing)

    @staticmethod
    def remove_where(collection: Collection, where: dict[str, Any]) -> list[str]:
        """Delete every record matching ``where``; returns their ids."""
        ids = collection.get(where=where, include=[])["ids"]
        if ids:
            collection.delete(ids=ids)
        return list(ids)

    def drop(self, name: str) -> int:
        """Delete a collection by name; returns how many records it held (-1 if it did not exist)."""
        self.connection.forget([name])
        collection = self.existing(name)
        if collection is None:
            return -1
        count = collection.count()
        self.connection.client_for(name).delete_collection(name)
        return count
