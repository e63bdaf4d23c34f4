"""The API keys of a deployment and the limits set on its groups, kept in Chroma (``epm-keys``) so that
every epimem server on one Chroma server shares them and they survive restarts.

A key's record holds its public id, its name, groups, role, times and limits, and the salted hash of its
secret (``api.access.secrets`` makes and checks it): never the secret. The record's JSON goes in its
document (a key may name many group patterns). Beside the keys, one *stamp* record changes with every
write (a fresh random value): a server reads that one record to learn whether anything changed, and reads
the keys again only then (``api.access.keyring``). Writers write the key first and the stamp after it;
readers read the stamp first, so a reader that saw a stamp sees every key written before it.

Records are never deleted: a revoked key stays, with the time it was revoked, so that listing it says
what happened and its id is never reused. A group's limits are a record of their own (JSON in its
document, like a key's), under the same stamp, that names the group by its hash (``hashed_group``): a
deleted group's id stays in no record here (nor in ``memory.store.usage``'s counters).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from memory.store import codec
from memory.store.calls import StorePart, store_call
from memory.store.paging import pages
from memory.store.parts import RecordCollection
from memory.timeutil import from_epoch, to_epoch

KEYS = "epm-keys"
STAMP_ID = "stamp"
_KIND = "key"
_GROUP_KIND = "group-limits"
GroupLimits = dict[str, float]  # limit name -> value (absent: the setting's default)


@dataclass(frozen=True)
class StoredKey:
    """One API key as stored (no secret). ``limits``: requests_per_second, messages_per_day (absent: none)."""

    id: str
    name: str
    groups: tuple[str, ...]
    role: str
    secret_hash: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    limits: dict[str, float] = field(default_factory=dict)
    source: str = "api"  # "api": made over HTTP; "file": imported from the keys file

    def to_json(self) -> str:
        body = asdict(self)
        body["groups"] = list(self.groups)
        for name in ("created_at", "expires_at", "revoked_at"):
            value = getattr(self, name)
            body[name] = to_epoch(value) if value is not None else None
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StoredKey:
        body: dict[str, Any] = json.loads(text)
        times = {
            name: from_epoch(body[name]) if body.get(name) is not None else None
            for name in ("created_at", "expires_at", "revoked_at")
        }
        return cls(
            id=str(body["id"]),
            name=str(body["name"]),
            groups=tuple(str(g) for g in body["groups"]),
            role=str(body["role"]),
            secret_hash=str(body["secret_hash"]),
            created_at=times["created_at"] or from_epoch(0),
            expires_at=times["expires_at"],
            revoked_at=times["revoked_at"],
            limits={str(k): float(v) for k, v in dict(body.get("limits") or {}).items()},
            source=str(body.get("source", "api")),
        )


class KeyStore(StorePart):
    """The ``KeyRecords`` seam over Chroma."""

    def _collection(self) -> RecordCollection:
        collection = self._collections.open(KEYS, metadata={"epimem": "keys"})
        assert collection is not None
        return collection

    @store_call
    def stamp(self) -> str | None:
        """The value that changes with every write of a key (None: no key was ever written)."""
        found = self._collection().get(ids=[STAMP_ID], include=["documents"])
        return str((found["documents"] or [""])[0]) if found["ids"] else None

    @store_call
    def read(self) -> tuple[str | None, list[StoredKey], dict[str, GroupLimits]]:
        """The stamp, then every key and every group's limits (so that they are at least as new as the
        stamp)."""
        collection = self._collection()
        found = collection.get(ids=[STAMP_ID], include=["documents"])
        stamp = str((found["documents"] or [""])[0]) if found["ids"] else None
        keys: list[StoredKey] = []
        for page in pages(collection, ["documents"], where={"kind": _KIND}):
            keys.extend(StoredKey.from_json(str(document)) for document in page["documents"] or [])
        groups: dict[str, GroupLimits] = {}  # by hashed_group(group_id)
        for page in pages(collection, ["documents"], where={"kind": _GROUP_KIND}):
            for document in page["documents"] or []:
                body = json.loads(str(document))
                groups[str(body["group"])] = {str(k): float(v) for k, v in body["limits"].items()}
        return stamp, sorted(keys, key=lambda key: (key.created_at, key.id)), groups

    @store_call
    def get(self, key_id: str) -> StoredKey | None:
        found = self._collection().get(ids=[_record_id(key_id)], include=["documents"])
        if not found["ids"]:
            return None
        return StoredKey.from_json(str((found["documents"] or [""])[0]))

    @store_call
    def put(self, keys: list[StoredKey]) -> str:
        """Write keys (new or changed), then a new stamp; returns the stamp."""
        collection = self._collection()
        if keys:
            collection.upsert(
                ids=[_record_id(key.id) for key in keys],
                documents=[key.to_json() for key in keys],
                metadatas=[{"kind": _KIND} for _ in keys],
                embeddings=codec.placeholders(len(keys)),
            )
        return _new_stamp(collection)

    @store_call
    def put_group_limits(self, group_id: str, limits: GroupLimits) -> str:
        """Replace a group's limits (empty: the defaults again), then a new stamp; returns the stamp."""
        collection = self._collection()
        body = json.dumps({"group": hashed_group(group_id), "limits": limits}, sort_keys=True)
        record_id = "g." + hashed_group(group_id)
        collection.upsert(
            ids=[record_id], documents=[body], metadatas=[{"kind": _GROUP_KIND}], embeddings=codec.placeholders(1)
        )
        return _new_stamp(collection)


def hashed_group(group_id: str) -> str:
    """How the key store and the usage counters name a group: a one-way hash of its id."""
    return codec.digest("group", group_id)[:32]


def _new_stamp(collection: RecordCollection) -> str:
    stamp = uuid.uuid4().hex
    collection.upsert(
        ids=[STAMP_ID], documents=[stamp], metadatas=[{"kind": "stamp"}], embeddings=codec.placeholders(1)
    )
    return stamp


def _record_id(key_id: str) -> str:
    return f"k.{key_id}"
