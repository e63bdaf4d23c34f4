"""What a group's readers compare: a version that changes with every write to the group's records.

Two parts, so that the check is free where it can be:

- a counter per group kept by the connection's change feed (``memory.store.changes``): every write of
  this process publishes what it did there and moves it. Embedded Chroma is one process per folder, so
  there it is the whole version;
- with a Chroma server, other servers write too: every write that a cache could see also stamps the
  group's registry record (``epm-registry``): each process writes its own key, ``w.<its run id>``, set
  to its counter for the group (an upsert merges keys, so writers never overwrite each other and need
  no read-modify-write). A reader reads that one record (one call) to learn whether anything changed:
  the stamp is the record's keys and values. A delete followed by an add (same count, the case a count
  check misses) still moves a counter. A group delete removes the record: no stamp (None) is a version
  of its own. A stamp that differs from a snapshot's only in this process's own key says that only
  this process wrote since, and its feed says what (the read model patches its copy of the group
  with it; another key moved: the group is read again). Keys of old runs are dropped by a process's
  first write to a group once there are more than ``WRITER_KEYS`` (a reader then reads the group
  again, once).

Writers bump after their write has landed, readers read the version before the data: a snapshot
built while a write was under way carries the version from before it and is rebuilt on the next
check. (A writer that dies between its write and its bump leaves other servers' caches behind until
the next write of the group; the write was never acknowledged, and the retry or the recovery scan
writes again.)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import chromadb

from memory.store import codec
from memory.store.changes import Change

if TYPE_CHECKING:
    from memory.store.collections import Collections
    from memory.store.connection import ChromaConnection


WRITER_KEYS = 16
PREFIX = "w."


def changed(collections: Collections, group_id: str, *, stamp: bool = True, change: Change | None = None) -> None:
    """Publish a write to the group's records (inside a store call, after the write). ``change``: what
    the write did (``memory.store.changes``), which the read model applies to its copy of the group
    instead of reading it again; None: the next read reads the group again."""
    connection = collections.connection
    version = connection.feed.publish(group_id, change)
    if stamp and connection.shared:
        first = connection.first_stamp(group_id)
        try:
            _stamp(connection, group_id, version, first=first)
        except chromadb.errors.NotFoundError:  # the registry was dropped on the server since: opened again, once
            connection.stamp_registry = None
            _stamp(connection, group_id, version, first=first)


def _stamp(connection: ChromaConnection, group_id: str, version: int, *, first: bool) -> None:
    """This process's counter for the group, upserted into the group's registry record."""
    registry = connection.stamp_registry
    if registry is None:
        # Its own handle, not a cached RecordCollection: the stamp is bookkeeping beside the write it follows.
        # Opened once per connection: a round trip less for every write.
        registry = connection.client.get_or_create_collection(
            codec.REGISTRY, metadata={"epimem": "registry"}, embedding_function=None
        )
        connection.stamp_registry = registry
    record_id = codec.registry_record_id(group_id)
    metadata: dict[str, Any] = {"group_id": group_id, own_key(connection.run_id): version}
    if first:  # old runs' keys go once there are too many
        found = registry.get(ids=[record_id], include=["metadatas"])
        before = dict(((found["metadatas"] or [{}])[0] or {}) if found["ids"] else {})
        writers = [key for key in before if key.startswith(PREFIX) or key == "stamp"]
        if len(writers) > WRITER_KEYS:
            metadata.update({key: None for key in writers if key != own_key(connection.run_id)})
    registry.upsert(**codec.written([record_id], [group_id], [metadata]), embeddings=codec.placeholders(1))


def own_key(run_id: str) -> str:
    return PREFIX + run_id


def only_own(before: str | None, after: str | None, run_id: str) -> bool:
    """Whether the stamp ``after`` differs from ``before`` in this process's own key alone (or not at
    all): no other process stamped the group in between."""
    if before is None or after is None:
        return before == after
    old, new = json.loads(before), json.loads(after)
    key = own_key(run_id)
    old.pop(key, None)
    new.pop(key, None)
    return bool(old == new)


def shared_stamp(collections: Collections, group_id: str) -> str | None:
    """The group's stamp in the registry: its writers' keys and counters (JSON, keys sorted; None
    without a record)."""
    found = collections.registry().get(ids=[codec.registry_record_id(group_id)], include=["metadatas"])
    if not found["ids"]:
        return None
    metadata = dict((found["metadatas"] or [{}])[0] or {})
    return json.dumps({k: v for k, v in metadata.items() if k.startswith(PREFIX) or k == "stamp"}, sort_keys=True)
