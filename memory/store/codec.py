"""How epimem's models are written into Chroma: collection names, record ids, record metadata and
back, and the ``where`` clauses of a ``RecordFilter``. Only this package knows these.

Collections (names are derived from hashes, so any id maps to a valid, collision-free name; the
real ids live in metadata):

- ``epm-registry``          one record per group (lets the service enumerate groups).
- ``epm-l-<sha(group)>``    the group's log: messages verbatim with their processing state,
                            SessionInfo and GroupConfiguration records, summary journals, formation
                            leases. No vectors worth the name (a constant 1-d placeholder).
- ``epm-p-<sha(group,session)>``  the partition: episode, summary and message vectors of one session.
- ``epm-i-<sha(group)>``    the group index: the same vectors for the whole group, so that a
                            group-wide search is one query instead of a fan-out over every partition.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memory.models import BoundaryReason, Episode, Message, MessageState, Role, StoredMessage
from memory.store.filters import RecordFilter
from memory.timeutil import from_epoch, to_epoch

REGISTRY = "epm-registry"
PARTITION_PREFIX = "epm-p-"  # memory.store.connection keeps these collections in an engine of their own
GROUP_RECORD_ID = "group"
PLACEHOLDER: Any = [0.0]


# How a record is written to Chroma (tests/benchmarks/record_format.py measured the choices):
# - its text (an episode's content, a message, a session's or group's JSON) goes in its metadata, not in
#   Chroma's document: Chroma indexes every document in a trigram full-text table that epimem never
#   queries (BM25 runs over the read snapshot);
# - the keys written once with a record and never filtered on nor updated in place go with the text:
#   Chroma stores and indexes each metadata key as a row of its own;
# - both go in one value under BODY_KEY, the JSON ``[text, packed keys]`` behind the time of the write
#   (STAMP_WIDTH hex digits of nanoseconds). Chroma indexes every string value in one SQLite index
#   ordered by (key, value): a value that begins with its text lands on a random page of that index, one
#   that begins with the time lands at its end, where the last write left the pages in memory. At 10,000
#   partitions a partition's write cost ~7 ms less (docs/benchmarks-speed.md).
# Records written before read the same: a document with every key on its own (the first format), or
# the text under TEXT_KEY and the packed keys under PACKED_KEY (the second).
BODY_KEY = "body"
STAMP_WIDTH = 16
TEXT_KEY = "text"  # the second format's
PACKED_KEY = "fields"  # the second format's
PACKED = frozenset(
    {
        "group_id",
        "message_id",
        "title",
        "created",
        "content_type",
        "generation",
        "message_count",
        "source_ids",
        "producer_id",
        "produced_for_id",
        "user_metadata",
        "source_episode_ids",
        "period_start",
        "period_end",
        "role",
        "meta",
        "received",
        "seq",
    }
)  # never "kind", "session_id", "ts" (filters), "state", "episode_id", "boundary", "summarised_by" (updated)


def packed_apart(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record's metadata as the keys kept on their own and those packed (PACKED)."""
    kept = {key: value for key, value in metadata.items() if key not in PACKED}
    return kept, {key: value for key, value in metadata.items() if key in PACKED}


def stored_metadata(text: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What is written to Chroma for a record's text and metadata."""
    stored, packed = packed_apart(metadata)
    body = json.dumps([text, packed], ensure_ascii=False, separators=(",", ":"))
    stored[BODY_KEY] = f"{time.time_ns():0{STAMP_WIDTH}x}{body}"
    return stored


def unstamped(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Stored metadata without the time of its write (the same text written again is the same record)."""
    return {key: _body_json(value) if key == BODY_KEY else value for key, value in metadata.items()}


def _body_json(body: Any) -> str:
    return str(body)[STAMP_WIDTH:]


def written(
    ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], *, overwrite: bool = False
) -> dict[str, Any]:
    """Chroma's ``add``/``upsert`` arguments for records (without their embeddings). ``overwrite`` (an
    upsert only): the records may exist with another text (a correction, a redaction, an updated
    session), and an upsert merges what it writes into what a record holds: their document is written
    empty and the second format's keys set to None (removed), or the old text a record written in an
    earlier format holds would stay. Otherwise no document is written (an empty one costs ~10% of a
    partition's write, tests/benchmarks/record_format.py)."""
    stored = [stored_metadata(t, m) for t, m in zip(texts, metadatas, strict=True)]
    columns: dict[str, Any] = {"ids": list(ids), "metadatas": stored}
    if overwrite:
        columns["documents"] = [""] * len(columns["ids"])
        for metadata in stored:
            metadata.update({TEXT_KEY: None, PACKED_KEY: None})
    return columns


def read_back(document: str | None, metadata: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """A record's text and its metadata, as they were written (from what Chroma returns)."""
    found = dict(metadata or {})
    body = found.pop(BODY_KEY, None)
    text = found.pop(TEXT_KEY, None)
    packed = found.pop(PACKED_KEY, None)
    if body is not None:
        text, fields = json.loads(_body_json(body))
        found.update(fields)
        return str(text), found
    if packed is not None:
        found.update(json.loads(packed))
    return (document or "") if text is None else str(text), found


def rows_of(found: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The records of a Chroma ``get`` result (documents and metadatas included): id, text, metadata."""
    ids = list(found["ids"])
    documents = found.get("documents") or [None] * len(ids)
    metadatas = found.get("metadatas") or [None] * len(ids)
    return [(i, *read_back(d, m)) for i, d, m in zip(ids, documents, metadatas, strict=True)]


def placeholders(count: int) -> Any:
    """Log records carry a constant 1-d vector: Chroma needs one, and we never search the log."""
    return [PLACEHOLDER] * count


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def partition_name(group_id: str, session_id: str) -> str:
    return f"{PARTITION_PREFIX}{digest(group_id, session_id)}"


def log_name(group_id: str) -> str:
    return f"epm-l-{digest(group_id)}"


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


def vector_collection_metadata(kind: str, group_id: str, session_id: str | None, model_id: str) -> dict[str, Any]:
    return clean_metadata(
        {
            "epimem": kind,
            "group_id": group_id,
            "session_id": session_id,
            "epimem_model": model_id,
            "hnsw:space": "cosine",
        }
    )
