"""The store as the service uses it: its parts over one connection, for one embedding model."""

from __future__ import annotations

from dataclasses import dataclass

from memory.store.admin import StoreAdmin
from memory.store.collections import Collections
from memory.store.connection import ChromaConnection
from memory.store.dump import StoreDump
from memory.store.group_reads import GroupReads
from memory.store.keys import KeyStore
from memory.store.log import LogStore
from memory.store.usage import UsageStore
from memory.store.vectors import VectorStore
from memory.store.webhook_store import WebhookStore


@dataclass(frozen=True)
class Store:
    log: LogStore
    vectors: VectorStore
    admin: StoreAdmin
    group_reads: GroupReads  # a group read whole, for the read model (memory.readmodel)
    keys: KeyStore  # the deployment's API keys and group limits
    usage: UsageStore  # usage counters shared by its servers
    dump: StoreDump  # collections read and written whole (backups)
    webhooks: WebhookStore  # subscriptions, outbox, delivery log and leases of change events

    @property
    def model_id(self) -> str:
        return self.admin.model_id

    @property
    def connection(self) -> ChromaConnection:
        return self.admin.connection


def open_store(connection: ChromaConnection, *, model_id: str) -> Store:
    collections = Collections(connection, model_id)
    return Store(
        log=LogStore(collections),
        vectors=VectorStore(collections),
        admin=StoreAdmin(collections),
        group_reads=GroupReads(collections),
        keys=KeyStore(collections),
        usage=UsageStore(collections),
        dump=StoreDump(collections),
        webhooks=WebhookStore(collections),
    )
