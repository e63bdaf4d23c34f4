"""How epimem's models are written into Chroma: collection names, record ids, record metadata and
back, and the ``where`` clauses of a ``RecordFilter``. Only this package knows these. The record format
(a record's text and packed keys in its document) is ``memory.store.record_format``, re-exported here.

Collections (names are derived from hashes, so any id maps to a valid, collision-free name of 70
bytes; the real ids live in metadata, a value longer than Chroma Cloud allows there as its digest:
``collection_value``). Record ids are at most 128 bytes, whatever the caller's ids: hashes, or an
episode's uuid (at most 128 bytes, checked where one is imported):

- ``epm-registry``          one record per group (lets the service enumerate groups).
- ``epm-l-<sha(group)>``    the group's log: messages verbatim with their processing state,
                            SessionInfo and GroupConfiguration records, summary journals, formation
                            leases, and the pieces of the group's records longer than one document
                            (memory.store.parts). No vectors worth the name (a constant 1-d placeholder).
- ``epm-p-<sha(group,session)>``  the partition: episode, summary and message vectors of one session.
- ``epm-i-<sha(group)>``    the group index: the same vectors for the whole group, so that a
                            group-wide search is one query instead of a fan-out over every partition.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from memory.models import BoundaryReason, Episode, Message, MessageState, Role, StoredMessage
from memory.store.filters import RecordFilter
from memory.store.quotas import COLLECTION_VALUE_BYTES, utf8_bytes
from memory.store.record_format import (  # the record format, as the store's readers and writers use it
    BODY_KEY,
    PACKED,
    PACKED_KEY,
    STAMP_WIDTH,
    TEXT_KEY,
    packed_apart,
    read_back,
    rows_of,
    unstamped,
    written,
)
from memory.timeutil import from_epoch, to_epoch

__all__ = [
    "BODY_KEY",
    "PACKED",
    "PACKED_KEY",
    "STAMP_WIDTH",
    "TEXT_KEY",
    "packed_apart",
    "read_back",
    "rows_of",
    "unstamped",
    "written",
]

REGISTRY = "epm-registry"
PARTITION_PREFIX = "epm-p-"  # memory.store.connection keeps these collections in an engine of their own
GROUP_RECORD_ID = "group"
PLACEHOLDER: Any = [0.0]


def placeholders(count: int) -> Any:
    """Log records carry a constant 1-d vector: Chroma needs one, and we never search the log."""
    return [PLACEHOLDER] * count


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def partition_name(group_id: str, session_id: str) -> str:
    return f"{PARTITION_PREFIX}{digest(group_id, session_id)}"


def log_name(group_id: str) -> str:
    return f"epm-l-{digest(group_id)}"


def log_name_of(recorded_group: Any) -> str:
    """The log's name of the group a collection's metadata names (``collection_value`` of its id)."""
    hashed = hashed_group(recorded_group)
    return f"epm-l-{hashed}" if hashed is not None else log_name(str(recorded_group))


def index_name(group_id: str) -> str:
    return f"epm-i-{digest(group_id)}"


def registry_record_id(group_id: str) -> str:
    return digest(group_id)


@functools.lru_cache(maxsize=1 << 16)
def message_record_id(session_id: str, message_id: str) -> str:
    """Kept for recent ids: the read path derives the same ids several times per request."""
    return f"m-{digest(session_id, message_id)[:40]}"


OPEN_EPISODE_PREFIX = "open-"


def open_episode_id(session_id: str) -> str:
    """The id under which a session's pending messages (not in an episode yet) are found: their
    vector records name it as their episode until formation names the real one."""
    return f"{OPEN_EPISODE_PREFIX}{digest(session_id)[:40]}"


def is_open_episode_id(episode_id: str) -> bool:
    return episode_id.startswith(OPEN_EPISODE_PREFIX)


def session_record_id(session_id: str) -> str:
    return f"s-{digest(session_id)[:40]}"


def lease_record_id(session_id: str, epoch: int) -> str:
    return f"lease-{digest(session_id)[:40]}-{epoch:012d}"


def clean_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Chroma metadata values must be str/int/float/bool and not None."""
    return {key: value for key, value in metadata.items() if value is not None}


def episode_metadata(episode: Episode) -> dict[str, Any]:
    return clean_metadata(
        {
            "kind": episode.episode_type.value,
            "group_id": episode.group_id,
            "session_id": episode.session_id,
            "episode_id": episode.uuid,
            "title": episode.title,
            "ts": to_epoch(episode.timestamp),
            "created": to_epoch(episode.created_at),
            "content_type": episode.content_type.value,
            "generation": episode.generation.value,
            "boundary": episode.boundary_reason.value,
            "message_count": episode.message_count,
            "source_ids": json.dumps(list(episode.source_message_ids)),
            "producer_id": episode.producer_id,
            "produced_for_id": episode.produced_for_id,
            "user_metadata": json.dumps(episode.user_metadata) if episode.user_metadata else None,
            "summarised_by": episode.summarised_by,
            "source_episode_ids": json.dumps(list(episode.source_episode_ids)) if episode.source_episode_ids else None,
            "period_start": to_epoch(episode.period_start) if episode.period_start else None,
            "period_end": to_epoch(episode.period_end) if episode.period_end else None,
        }
    )


def episode_from_record(document: str, metadata: dict[str, Any]) -> Episode:
    return Episode(
        uuid=metadata["episode_id"],
        episode_type=metadata["kind"],
        content_type=metadata.get("content_type", "string"),
        title=metadata["title"],
        content=document,
        timestamp=from_epoch(float(metadata["ts"])),
        created_at=from_epoch(float(metadata["created"])),
        group_id=metadata["group_id"],
        session_id=metadata["session_id"],
        producer_id=metadata.get("producer_id"),
        produced_for_id=metadata.get("produced_for_id"),
        user_metadata=json.loads(metadata["user_metadata"]) if metadata.get("user_metadata") else {},
        source_message_ids=tuple(json.loads(metadata["source_ids"])),
        message_count=int(metadata["message_count"]),
        boundary_reason=metadata["boundary"],
        generation=metadata["generation"],
        summarised_by=metadata.get("summarised_by"),
        source_episode_ids=tuple(json.loads(metadata["source_episode_ids"]))
        if "source_episode_ids" in metadata
        else (),
        period_start=from_epoch(float(metadata["period_start"])) if "period_start" in metadata else None,
        period_end=from_epoch(float(metadata["period_end"])) if "period_end" in metadata else None,
    )


def message_vector_metadata(stored: StoredMessage) -> dict[str, Any]:
    """A message's vector record: the episode it is (being) formed into, the session's open episode
    while it is pending."""
    message = stored.message
    formed = stored.state is not MessageState.PENDING and stored.episode_id
    return clean_metadata(
        {
            "kind": "message",
            "group_id": stored.group_id,
            "session_id": stored.session_id,
            "message_id": message.id,
            "episode_id": stored.episode_id if formed else open_episode_id(stored.session_id),
            "ts": to_epoch(message.timestamp),
            "role": message.role.value,
            "producer_id": message.producer_id,
            "produced_for_id": message.produced_for_id,
        }
    )


def log_metadata(stored: StoredMessage) -> dict[str, Any]:
    message = stored.message
    return clean_metadata(
        {
            "kind": "message",
            "session_id": stored.session_id,
            "message_id": message.id,
            "role": message.role.value,
            "ts": to_epoch(message.timestamp),
            "producer_id": message.producer_id,
            "produced_for_id": message.produced_for_id,
            "meta": json.dumps(message.metadata) if message.metadata else None,
            "state": stored.state.value,
            "episode_id": stored.episode_id,
            "boundary": stored.boundary_reason.value if stored.boundary_reason else None,
            "received": to_epoch(stored.received_at),
            "seq": stored.sequence,
        }
    )


def state_metadata(stored: StoredMessage) -> dict[str, Any]:
    """The processing state of a message's log record, as a metadata update (None removes a key)."""
    return {
        "state": stored.state.value,
        "episode_id": stored.episode_id,
        "boundary": stored.boundary_reason.value if stored.boundary_reason else None,
    }


def log_columns(messages: list[StoredMessage], *, overwrite: bool = False) -> dict[str, Any]:
    """The log records of messages, as Chroma's add/upsert arguments (``overwrite``: see ``written``)."""
    return {
        **written(
            [message_record_id(stored.session_id, stored.message.id) for stored in messages],
            [stored.message.content for stored in messages],
            [log_metadata(stored) for stored in messages],
            overwrite=overwrite,
        ),
        "embeddings": placeholders(len(messages)),
    }


def stored_from_log(group_id: str, document: str, metadata: dict[str, Any]) -> StoredMessage:
    """A log record as the message it stores (validated when it was written: not again, which took a
    third of reading a big group's candidate messages)."""
    message = Message.model_construct(
        id=metadata["message_id"],
        role=Role(metadata["role"]),
        content=document,
        timestamp=from_epoch(float(metadata["ts"])),
        producer_id=metadata.get("producer_id"),
        produced_for_id=metadata.get("produced_for_id"),
        metadata=json.loads(metadata["meta"]) if metadata.get("meta") else {},
    )
    boundary = metadata.get("boundary")
    return StoredMessage.model_construct(
        group_id=group_id,
        session_id=metadata["session_id"],
        message=message,
        state=MessageState(metadata["state"]),
        episode_id=metadata.get("episode_id"),
        boundary_reason=BoundaryReason(boundary) if boundary else None,
        received_at=from_epoch(float(metadata["received"])),
        sequence=int(metadata.get("seq", 0)),
    )


def where_all(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Chroma wants $and only for two or more clauses."""
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def vector_where(selection: RecordFilter | None, *, partition: bool) -> dict[str, Any] | None:
    """The ``where`` clause of a filter; on a partition the session is implied by the collection."""
    if selection is None:
        return None
    clauses: list[dict[str, Any]] = []
    if selection.kinds is not None:
        kinds = [kind.value for kind in selection.kinds]
        clauses.append({"kind": kinds[0]} if len(kinds) == 1 else {"kind": {"$in": kinds}})
    if selection.session_ids is not None and not partition:
        clauses.append({"session_id": {"$in": list(selection.session_ids)}})
    if selection.since is not None:
        clauses.append({"ts": {"$gte": selection.since}})
    if selection.before is not None:
        clauses.append({"ts": {"$lt": selection.before}})
    if selection.until is not None:
        clauses.append({"ts": {"$lte": selection.until}})
    return where_all(clauses)


HASHED = "sha256:"  # a collection metadata value stored as the digest of a longer one


def collection_value(value: str) -> str:
    """A collection metadata value within Chroma Cloud's quota: the value, or the marked digest of one longer
    than COLLECTION_VALUE_BYTES (a group id of that many bytes: the registry's record of the group has the
    same digest for its id, and the group id as its text)."""
    return value if utf8_bytes(value) <= COLLECTION_VALUE_BYTES else HASHED + digest(value)


def same_value(recorded: Any, value: str) -> bool:
    """Whether a collection metadata value records ``value`` (as it is, or as its digest)."""
    return recorded == value or recorded == collection_value(value)


def hashed_group(recorded: Any) -> str | None:
    """The registry record id of a group whose collection metadata holds its id as a digest, else None."""
    return recorded.removeprefix(HASHED) if isinstance(recorded, str) and recorded.startswith(HASHED) else None


def log_collection_metadata(group_id: str) -> dict[str, Any]:
    return {"epimem": "log", "group_id": collection_value(group_id)}


def vector_collection_metadata(kind: str, group_id: str, session_id: str | None, model_id: str) -> dict[str, Any]:
    return clean_metadata(
        {
            "epimem": kind,
            "group_id": collection_value(group_id),
            "session_id": collection_value(session_id) if session_id is not None else None,
            "epimem_model": collection_value(model_id),
            "hnsw:space": "cosine",
        }
    )
