"""The store as the service uses it: its three parts over one connection, for one embedding model."""

from __future__ import annotations

from dataclasses import dataclass

from memory.readmodel.cache import SnapshotCache
from memory.store.admin import StoreAdmin
from memory.store.collections import Collections
from memory.store.connection import ChromaConnection
from memory.store.log import LogStore
from memory.store.vectors import VectorStore


@dataclass(frozen=True)
class Store:
    log: LogStore
    vectors: VectorStore
    admin: StoreAdmin

    @property
    def model_id(self) -> str:
        return self.admin.model_id

    @property
    def connection(self) -> ChromaConnection:
        return self.admin.connection


def open_store(connection: ChromaConnection, *, model_id: str, persist: bool = False) -> Store:
    """``persist``: the read cache keeps its snapshots on disk between runs (embedded Chroma; the
    service's store, not a second one opened on the same connection)."""
    collections = Collections(connection, model_id)
    vectors = VectorStore(collections, snapshots=SnapshotCache(collections, persist=persist))
    return Store(log=LogStore(collections), vectors=vectors, admin=StoreAdmin(collections))
