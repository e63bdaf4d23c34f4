"""What a group's read caches compare: a version that changes with every write to the group's records.

Two parts, so that the check is free where it can be:

- a counter per group kept by the connection (``ChromaConnection.bump``): every write of this
  process moves it. Embedded Chroma is one process per folder, so there it is the whole version;
- with a Chroma server, other servers write too: every write that a cache could see also stores a
  new random stamp in the group's registry record (``epm-registry``), and a reader reads that one
  record (one call) to learn whether anything changed. A random stamp, not a counter: two servers
  writing at once need no read-modify-write, and a delete followed by an add (same count, the
  case a count check misses) still gives a new stamp. A group delete removes the record: no stamp
  (None) is a version of its own.

Writers bump after their write has landed, readers read the version before the data: a snapshot
built while a write was under way carries the version from before it and is rebuilt on the next
check. (A writer that dies between its write and its bump leaves other servers' caches behind until
the next write of the group; the write was never acknowledged, and the retry or the recovery scan
writes again.)
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from memory.store import codec

if TYPE_CHECKING:
    from memory.store.collections import Collections

Version = tuple[int, str | None]  # (writes of this process, the shared stamp; None: embedded or no record)


def changed(collections: Collections, group_id: str, *, stamp: bool = True, change: Any = None) -> None:
    """Record a write to the group's records (inside a store call, after the write). ``change``: what
    the write did (``memory.store.snapshot_patch.Change``), which an embedded read cache applies to its
    snapshot instead of reading the group again; None: the next read reads the group again."""
    connection = collections.connection
    connection.bump(group_id, change)
    if stamp and connection.shared:
        # Its own handle, not the cached ones: the stamp is bookkeeping beside the write it follows.
        registry = connection.client.get_or_create_collection(
            codec.REGISTRY, metadata={"epimem": "registry"}, embedding_function=None
        )
        registry.upsert(
            ids=[codec.registry_record_id(group_id)],
            embeddings=codec.placeholders(1),
            documents=[group_id],
            metadatas=[{"group_id": group_id, "stamp": uuid.uuid4().hex}],
        )


def local(collections: Collections, group_id: str) -> int:
    return collections.connection.local_version(group_id)


def shared_stamp(collections: Collections, group_id: str) -> str | None:
    """The group's stamp in the registry ("" for a record without one, None without a record)."""
    found = collections.registry().get(ids=[codec.registry_record_id(group_id)], include=["metadatas"])
    if not found["ids"]:
        return None
    return str(((found["metadatas"] or [{}])[0] or {}).get("stamp", ""))
