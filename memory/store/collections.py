"""Opening epimem's collections: cached handles, the embedding-model check, paged reads, drops.

Partitions and the group index record the embedding model that built them; opening them with
another model is refused (``ModelMismatchError``). Collections are never deleted or recreated to
recover from an error. Every collection is handed out as a ``RecordCollection``: its calls within
Chroma Cloud's quotas (``memory.store.bounded``), its records longer than one document kept in pieces
in the group's log (``memory.store.parts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import chromadb
from chromadb.api import ClientAPI

from memory.errors import ModelMismatchError
from memory.store import codec
from memory.store.connection import ChromaConnection
from memory.store.paging import collections_of, pages
from memory.store.parts import RecordCollection
from memory.store.records import Row

LOG_PREFIX = "epm-l-"


class Collections:
    """The collections of one connection, opened for one embedding model."""

    def __init__(self, connection: ChromaConnection, model_id: str) -> None:
        self.connection = connection
        self.model_id = model_id

    @property
    def client(self) -> ClientAPI:
        return self.connection.client

    def wrap(self, collection: Any) -> RecordCollection:
        """A Chroma collection as the store calls it: the registry's records never have pieces, a log keeps its
        records' pieces itself, any other epimem collection (partitions, indexes, their rebuilds) in the log
        of its group; a message's vector record never has any."""
        name, slots, page = str(collection.name), self.connection.slots, self.connection.listing_page
        metadata = collection.metadata or {}
        if name == codec.REGISTRY or "group_id" not in metadata:
            return RecordCollection(collection, slots, listing_page=page)
        if name.startswith(LOG_PREFIX):
            wrapped = RecordCollection(collection, slots, home=lambda create: wrapped, listing_page=page)
            return wrapped
        group = metadata["group_id"]
        return RecordCollection(
            collection,
            slots,
            home=lambda create: self._log_by_name(codec.log_name_of(group), group, create=create),
            may_have_pieces=lambda record: record.get("kind") != "message",
            listing_page=page,
        )

    def open(self, name: str, *, metadata: dict[str, Any], create: bool = True) -> RecordCollection | None:
        def open_(client: ClientAPI) -> RecordCollection | None:
            if create:
                return self.wrap(client.get_or_create_collection(name, metadata=metadata, embedding_function=None))
            return self.existing(name)

        collection = self.connection.handle(name, open_)
        if collection is None:
            return None
        recorded = (collection.metadata or {}).get("epimem_model")
        if recorded is not None and "epimem_model" in metadata and not codec.same_value(recorded, self.model_id):
            self.connection.forget([name])
            raise ModelMismatchError(
                f"collection {name} was built with embedding model {recorded!r}, "
                f"not {self.model_id!r}; run `epimem reembed` to rebuild its vectors",
                details={"recorded": recorded, "configured": self.model_id},
            )
        return collection

    def listed(self) -> list[Any]:
        """Every collection of every engine (memory.store.connection), as Chroma lists them."""
        return [found for engine in self.connection.engines for found in collections_of(engine.client)]

    def existing(self, name: str) -> RecordCollection | None:
        """A collection by name without the model check, or None."""
        try:
            return self.wrap(self.connection.client_for(name).get_collection(name, embedding_function=None))
        except (chromadb.errors.NotFoundError, ValueError):
            return None

    def registry(self) -> RecordCollection:
        collection = self.open(codec.REGISTRY, metadata={"epimem": "registry"})
        assert collection is not None
        return collection

    def log(self, group_id: str, *, create: bool = True) -> RecordCollection | None:
        return self.open(codec.log_name(group_id), metadata=codec.log_collection_metadata(group_id), create=create)

    def _log_by_name(self, name: str, recorded_group: Any, *, create: bool) -> RecordCollection | None:
        return self.open(name, metadata={"epimem": "log", "group_id": recorded_group}, create=create)

    def written_log(self, group_id: str) -> RecordCollection:
        """The group's log, created if needed (for writes)."""
        log = self.log(group_id)
        assert log is not None
        return log

    def vectors(self, group_id: str, session_id: str | None = None, *, create: bool = False) -> RecordCollection | None:
        """A session's partition, or the group index when ``session_id`` is None."""
        if session_id is None:
            name, kind = codec.index_name(group_id), "index"
        else:
            name, kind = codec.partition_name(group_id, session_id), "partition"
        metadata = codec.vector_collection_metadata(kind, group_id, session_id, self.model_id)
        return self.open(name, metadata=metadata, create=create)

    def rows(self, collection: RecordCollection, **kwargs: Any) -> Iterator[Row]:
        """Every record (id, document, metadata) matching ``kwargs`` (e.g. ``where``), page by page."""
        for page in pages(collection, ["documents", "metadatas"], **kwargs):
            yield from codec.rows_of(page)

    @staticmethod
    def remove(collection: RecordCollection, ids: Iterable[str]) -> list[str]:
        """Delete the records of ``ids`` that exist (with their pieces); returns their ids."""
        return collection.remove(list(ids))

    @staticmethod
    def remove_where(collection: RecordCollection, where: dict[str, Any]) -> list[str]:
        """Delete every record matching ``where``; returns their ids."""
        return collection.remove_where(where)

    def drop(self, name: str) -> int:
        """Delete a collection by name; returns how many records it held (-1 if it did not exist)."""
        self.connection.forget([name])
        collection = self.existing(name)
        if collection is None:
            return -1
        count = collection.count()
        self.connection.client_for(name).delete_collection(name)
        return count
