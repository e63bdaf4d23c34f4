"""The Chroma store: one collection per (group, session) partition, plus per-group log and index.

Collections (names are derived from hashes, so any id maps to a valid, collision-free name;
the real ids live in metadata):

- ``epm-registry``          one record per group (lets the service enumerate groups).
- ``epm-l-<sha(group)>``    the group's log: messages verbatim with their processing state,
                            SessionInfo and GroupConfiguration records. No vectors worth the
                            name (a constant 1-d placeholder): it is the durable record.
- ``epm-p-<sha(group,session)>``  the partition: episode, summary and message vectors of one session.
- ``epm-i-<sha(group)>``    the group index: the same vectors for the whole group, so that a
                            group-wide search is one query instead of a fan-out over every partition.

Partitions and the group index record the embedding model that built them; opening them with
another model is refused. Collections are never deleted or recreated to recover from an error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import chromadb
import httpx
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from memory.connection import ChromaConnection
from memory.errors import ModelMismatchError, StoreUnavailableError
from memory.models import (
    BoundaryReason,
    Episode,
    GroupConfiguration,
    Message,
    MessageState,
    SessionInfo,
    StoredMessage,
)
from memory.receipts import DeletionReceipt as DeletionReceipt  # re-exported: its old home
from memory.timeutil import from_epoch, to_epoch
from memory.tracing import span

REGISTRY = "epm-registry"
_PLACEHOLDER: Any = [0.0]


def _placeholders(count: int) -> Any:
    """Log records carry a constant 1-d vector: Chroma needs one, and we never search the log."""
    return [_PLACEHOLDER] * count


_GET_PAGE = 5000

P = ParamSpec("P")
R = TypeVar("R")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def partition_name(group_id: str, session_id: str) -> str:
    return f"epm-p-{_digest(group_id, session_id)}"


def log_name(group_id: str) -> str:
    return f"epm-l-{_digest(group_id)}"


def index_name(group_id: str) -> str:
    return f"epm-i-{_digest(group_id)}"


def message_record_id(session_id: str, message_id: str) -> str:
    return f"m-{_digest(session_id, message_id)[:40]}"


def session_record_id(session_id: str) -> str:
    return f"s-{_digest(session_id)[:40]}"


GROUP_RECORD_ID = "group"


_INTERNAL_RETRIES = 3


def _store_call(function: Callable[Concatenate[ChromaStore, P], R]) -> Callable[Concatenate[ChromaStore, P], R]:
    """Map transport failures of a Chroma server to StoreUnavailableError (HTTP 503, retryable).

    Chroma's embedded engine occasionally fails a read under concurrent writes with an
    ``InternalError`` ("Error creating hnsw segment reader: Nothing found on disk"); the same
    call succeeds moments later. Such calls are retried a few times (every store write is an
    idempotent upsert/insert), then reported as 503 rather than as a server error.
    """

    @functools.wraps(function)
    def wrapper(store: ChromaStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(_INTERNAL_RETRIES + 1):
            try:
                with span(f"epimem.store.{function.__name__}"), store.connection.call():
                    return function(store, *args, **kwargs)
            except (httpx.TransportError, ConnectionError, TimeoutError) as error:
                raise StoreUnavailableError(f"the vector store is unavailable: {error}") from error
            except chromadb.errors.InternalError as error:
                if attempt == _INTERNAL_RETRIES:
                    raise StoreUnavailableError(
                        f"the vector store failed internally: {error}", retry_after=1
                    ) from error
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    return wrapper


@dataclass(frozen=True)
class VectorRecord:
    """One vector in a partition: an episode, a summary or a message."""

    id: str
    document: str
    metadata: dict[str, Any]
    embedding: np.ndarray | None = None


@dataclass(frozen=True)
class VectorHit:
    id: str
    document: str
    metadata: dict[str, Any]
    distance: float


def where_all(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Chroma wants $and only for two or more clauses."""
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _clean_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Chroma metadata values must be str/int/float/bool and not None."""
    return {key: value for key, value in metadata.items() if value is not None}


def episode_metadata(episode: Episode) -> dict[str, Any]:
    return _clean_metadata(
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
    message = stored.message
    return _clean_metadata(
        {
            "kind": "message",
            "group_id": stored.group_id,
            "session_id": stored.session_id,
            "message_id": message.id,
            "episode_id": stored.episode_id,
            "ts": to_epoch(message.timestamp),
            "role": message.role.value,
            "producer_id": message.producer_id,
            "produced_for_id": message.produced_for_id,
        }
    )


def _log_metadata(stored: StoredMessage) -> dict[str, Any]:
    message = stored.message
    return _clean_metadata(
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


def _log_columns(messages: Sequence[StoredMessage]) -> dict[str, Any]:
    """The log records of messages, as Chroma's add/upsert arguments."""
    return {
        "ids": [message_record_id(stored.session_id, stored.message.id) for stored in messages],
        "embeddings": _placeholders(len(messages)),
        "documents": [stored.message.content for stored in messages],
        "metadatas": [_log_metadata(stored) for stored in messages],
    }


def _stored_from_log(group_id: str, document: str, metadata: dict[str, Any]) -> StoredMessage:
    message = Message(
        id=metadata["message_id"],
        role=metadata["role"],
        content=document,
        timestamp=from_epoch(float(metadata["ts"])),
        producer_id=metadata.get("producer_id"),
        produced_for_id=metadata.get("produced_for_id"),
        metadata=json.loads(metadata["meta"]) if metadata.get("meta") else {},
    )
    boundary = metadata.get("boundary")
    return StoredMessage(
        group_id=group_id,
        session_id=metadata["session_id"],
        message=message,
        state=MessageState(metadata["state"]),
        episode_id=metadata.get("episode_id"),
        boundary_reason=BoundaryReason(boundary) if boundary else None,
        received_at=from_epoch(float(metadata["received"])),
        sequence=int(metadata.get("seq", 0)),
    )


class ChromaStore:
    """All persistence of epimem. Thread-safe; collection handles are cached by the connection."""

    def __init__(self, *, connection: ChromaConnection, model_id: str) -> None:
        self.connection = connection
        self._model_id = model_id

    @property
    def _client(self) -> ClientAPI:
        return self.connection.client

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def open_collections(self) -> int:
        return len(self.connection.cached())

    @_store_call
    def heartbeat(self) -> None:
        self._client.heartbeat()

    # -- collections -------------------------------------------------------------------

    def _collection(self, name: str, *, metadata: dict[str, Any], create: bool = True) -> Collection | None:
        def open_(client: ClientAPI) -> Collection | None:
            if create:
                return client.get_or_create_collection(name, metadata=metadata, embedding_function=None)
            try:
                return client.get_collection(name, embedding_function=None)
            except (chromadb.errors.NotFoundError, ValueError):
                return None

        collection = self.connection.handle(name, open_)
        if collection is None:
            return None
        recorded = (collection.metadata or {}).get("epimem_model")
        if recorded is not None and recorded != metadata.get("epimem_model", recorded):
            self.connection.forget([name])
            raise ModelMismatchError(
                f"collection {name} was built with embedding model {recorded!r}, "
                f"not {self._model_id!r}; run `epimem reembed` to rebuild its vectors",
                details={"recorded": recorded, "configured": self._model_id},
            )
        return collection

    def _forget(self, name: str) -> None:
        self.connection.forget([name])

    def _registry(self) -> Collection:
        collection = self._collection(REGISTRY, metadata={"epimem": "registry"})
        assert collection is not None
        return collection

    def _log(self, group_id: str, *, create: bool = True) -> Collection | None:
        return self._collection(log_name(group_id), metadata={"epimem": "log", "group_id": group_id}, create=create)

    def _vector_metadata(self, kind: str, group_id: str, session_id: str | None = None) -> dict[str, Any]:
        return _clean_metadata(
            {
                "epimem": kind,
                "group_id": group_id,
                "session_id": session_id,
                "epimem_model": self._model_id,
                "hnsw:space": "cosine",
            }
        )

    def _partition(self, group_id: str, session_id: str, *, create: bool = True) -> Collection | None:
        return self._collection(
            partition_name(group_id, session_id),
            metadata=self._vector_metadata("partition", group_id, session_id),
            create=create,
        )

    def _index(self, group_id: str, *, create: bool = True) -> Collection | None:
        return self._collection(index_name(group_id), metadata=self._vector_metadata("index", group_id), create=create)

    @staticmethod
    def _get_all(collection: Collection, **kwargs: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
        offset = 0
        while True:
            page = collection.get(include=["documents", "metadatas"], limit=_GET_PAGE, offset=offset, **kwargs)
            ids = page["ids"]
            documents = page["documents"] or []
            metadatas = page["metadatas"] or []
            for record_id, document, metadata in zip(ids, documents, metadatas, strict=True):
                yield record_id, document or "", dict(metadata or {})
            if len(ids) < _GET_PAGE:
                return
            offset += _GET_PAGE

    # -- groups, sessions ----------------------------------------------------------------

    @_store_call
    def register_group(self, group_id: str) -> None:
        self._registry().upsert(
            ids=[_digest(group_id)],
            embeddings=_placeholders(1),
            documents=[group_id],
            metadatas=[{"group_id": group_id}],
        )

    @_store_call
    def list_groups(self) -> list[str]:
        return sorted(document for _, document, _ in self._get_all(self._registry()))

    @_store_call
    def group_exists(self, group_id: str) -> bool:
        found = self._registry().get(ids=[_digest(group_id)], include=[])
        return bool(found["ids"])

    @_store_call
    def put_group_config(self, config: GroupConfiguration) -> None:
        self.register_group(config.group_id)
        log = self._log(config.group_id)
        assert log is not None
        log.upsert(
            ids=[GROUP_RECORD_ID],
            embeddings=_placeholders(1),
            documents=[config.model_dump_json()],
            metadatas=[{"kind": "group"}],
        )

    @_store_call
    def get_group_config(self, group_id: str) -> GroupConfiguration | None:
        log = self._log(group_id, create=False)
        if log is None:
            return None
        found = log.get(ids=[GROUP_RECORD_ID], include=["documents"])
        if not found["ids"]:
            return None
        return GroupConfiguration.model_validate_json((found["documents"] or [""])[0] or "")

    @_store_call
    def put_session_info(self, info: SessionInfo) -> None:
        self.register_group(info.group_id)
        log = self._log(info.group_id)
        assert log is not None
        log.upsert(
            ids=[session_record_id(info.session_id)],
            embeddings=_placeholders(1),
            documents=[info.model_dump_json()],
            metadatas=[{"kind": "session", "session_id": info.session_id}],
        )

    @_store_call
    def get_session_info(self, group_id: str, session_id: str) -> SessionInfo | None:
        log = self._log(group_id, create=False)
        if log is None:
            return None
        found = log.get(ids=[session_record_id(session_id)], include=["documents"])
        if not found["ids"]:
            return None
        return SessionInfo.model_validate_json((found["documents"] or [""])[0] or "")

    @_store_call
    def list_sessions(self, group_id: str) -> list[SessionInfo]:
        log = self._log(group_id, create=False)
        if log is None:
            return []
        sessions = [SessionInfo.model_validate_json(doc) for _, doc, _ in self._get_all(log, where={"kind": "session"})]
        return sorted(sessions, key=lambda info: (info.created_at, info.session_id))

    # -- messages (the durable log) ----------------------------------------------------------

    @_store_call
    def get_messages(self, group_id: str, session_id: str, message_ids: Sequence[str]) -> dict[str, StoredMessage]:
        log = self._log(group_id, create=False)
        if log is None or not message_ids:
            return {}
        ids = [message_record_id(session_id, message_id) for message_id in message_ids]
        found = log.get(ids=ids, include=["documents", "metadatas"])
        result: dict[str, StoredMessage] = {}
        for document, metadata in zip(found["documents"] or [], found["metadatas"] or [], strict=True):
            stored = _stored_from_log(group_id, document or "", dict(metadata or {}))
            result[stored.message.id] = stored
        return result

    @_store_call
    def put_messages(self, group_id: str, messages: Sequence[StoredMessage]) -> None:
        """Upsert full message records into the group's log (one batch, atomic per call in Chroma)."""
        if not messages:
            return
        log = self._log(group_id)
        assert log is not None
        log.upsert(**_log_columns(messages))

    @_store_call
    def list_messages(
        self, group_id: str, session_id: str, *, states: Iterable[MessageState] | None = None
    ) -> list[StoredMessage]:
        """A session's messages in event-time order (ties: arrival order)."""
        log = self._log(group_id, create=False)
        if log is None:
            return []
        clauses: list[dict[str, Any]] = [{"kind": "message"}, {"session_id": session_id}]
        if states is not None:
            clauses.append({"state": {"$in": [state.value for state in states]}})
        records = [
            _stored_from_log(group_id, doc, meta) for _, doc, meta in self._get_all(log, where=where_all(clauses))
        ]
        return sorted(records, key=lambda stored: (stored.message.timestamp, stored.sequence))

    @_store_call
    def sessions_with_unfinished_messages(self, group_id: str) -> set[str]:
        log = self._log(group_id, create=False)
        if log is None:
            return set()
        where = {"$and": [{"kind": "message"}, {"state": {"$ne": MessageState.DONE.value}}]}
        found = log.get(where=cast(Any, where), include=["metadatas"])
        return {str((meta or {})["session_id"]) for meta in found["metadatas"] or []}

    @_store_call
    def delete_messages(self, group_id: str, session_id: str, message_ids: Sequence[str]) -> DeletionReceipt:
        receipt = DeletionReceipt()
        log = self._log(group_id, create=False)
        if log is None or not message_ids:
            return receipt
        record_ids = [message_record_id(session_id, message_id) for message_id in message_ids]
        existing = log.get(ids=record_ids, include=[])["ids"]
        if existing:
            log.delete(ids=existing)
        receipt.log_records += len(existing)
        receipt.ids += existing
        receipt.merge(self.delete_vectors(group_id, session_id, record_ids))
        return receipt

    # -- vectors ---------------------------------------------------------------------------

    @_store_call
    def upsert_vectors(self, group_id: str, session_id: str, records: Sequence[VectorRecord]) -> None:
        """Write to the partition first, then the group index (both idempotent by id)."""
        if not records:
            return
        ids = [record.id for record in records]
        embeddings = np.stack([record.embedding for record in records if record.embedding is not None])
        if len(embeddings) != len(records):
            raise ValueError("every vector record needs its embedding")
        documents = [record.document for record in records]
        metadatas = [record.metadata for record in records]
        for collection in (self._partition(group_id, session_id), self._index(group_id)):
            assert collection is not None
            collection.upsert(ids=ids, embeddings=embeddings, documents=documents, metadatas=cast(Any, metadatas))

    @_store_call
    def update_vector_metadata(
        self, group_id: str, session_id: str, ids: Sequence[str], metadatas: list[dict[str, Any]]
    ) -> None:
        for collection in (self._partition(group_id, session_id, create=False), self._index(group_id, create=False)):
            if collection is not None and ids:
                collection.update(ids=list(ids), metadatas=cast(Any, metadatas))

    @_store_call
    def delete_vectors(self, group_id: str, session_id: str, ids: Sequence[str]) -> DeletionReceipt:
        receipt = DeletionReceipt()
        if not ids:
            return receipt
        for collection in (self._partition(group_id, session_id, create=False), self._index(group_id, create=False)):
            if collection is None:
                continue
            existing = collection.get(ids=list(ids), include=[])["ids"]
            if existing:
                collection.delete(ids=existing)
            receipt.vectors += len(existing)
            receipt.ids += existing
        return receipt

    @_store_call
    def get_vectors(
        self,
        group_id: str,
        *,
        session_id: str | None = None,
        ids: Sequence[str] | None = None,
        where: dict[str, Any] | None = None,
        include_embeddings: bool = False,
    ) -> list[VectorRecord]:
        collection = (
            self._partition(group_id, session_id, create=False) if session_id else self._index(group_id, create=False)
        )
        if collection is None or (ids is not None and not ids):
            return []  # Chroma refuses an empty id list
        include: list[Any] = ["documents", "metadatas"] + (["embeddings"] if include_embeddings else [])
        records: list[VectorRecord] = []
        offset = 0
        while True:
            kwargs: dict[str, Any] = {"include": include}
            if ids is not None:
                kwargs["ids"] = list(ids)
            else:
                kwargs.update(limit=_GET_PAGE, offset=offset)
            if where:
                kwargs["where"] = where
            page = collection.get(**kwargs)
            embeddings = page.get("embeddings")
            for position, record_id in enumerate(page["ids"]):
                records.append(
                    VectorRecord(
                        id=record_id,
                        document=(page["documents"] or [])[position] or "",
                        metadata=dict((page["metadatas"] or [])[position] or {}),
                        embedding=np.asarray(embeddings[position], dtype=np.float32)
                        if embeddings is not None
                        else None,
                    )
                )
            if ids is not None or len(page["ids"]) < _GET_PAGE:
                return records
            offset += _GET_PAGE

    @_store_call
    def count_vectors(self, group_id: str) -> int:
        index = self._index(group_id, create=False)
        return index.count() if index is not None else 0

    @_store_call
    def query(
        self,
        group_id: str,
        embedding: np.ndarray,
        *,
        k: int,
        session_id: str | None = None,
        where: dict[str, Any] | None = None,
    ) -> list[VectorHit]:
        """Nearest vectors in one partition (``session_id``) or in the whole group's index."""
        collection = (
            self._partition(group_id, session_id, create=False) if session_id else self._index(group_id, create=False)
        )
        if collection is None:
            return []
        result = collection.query(
            query_embeddings=[embedding],
            n_results=k,
            where=where or None,
            include=["documents", "metadatas", "distances"],
        )
        ids = result["ids"][0]
        documents = (result["documents"] or [[]])[0]
        metadatas = (result["metadatas"] or [[]])[0]
        distances = (result["distances"] or [[]])[0]
        return [
            VectorHit(id=i, document=d or "", metadata=dict(m or {}), distance=float(dist))
            for i, d, m, dist in zip(ids, documents, metadatas, distances, strict=True)
        ]

    # -- deletion of whole scopes -----------------------------------------------------------------

    def _drop_collection(self, name: str) -> int:
        """Delete a collection by name; returns how many records it held (0 if it did not exist)."""
        self._forget(name)
        try:
            collection = self._client.get_collection(name, embedding_function=None)
        except (chromadb.errors.NotFoundError, ValueError):
            return -1
        count = collection.count()
        self._client.delete_collection(name)
        return count

    @_store_call
    def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        receipt = DeletionReceipt()
        name = partition_name(group_id, session_id)
        dropped = self._drop_collection(name)
        if dropped >= 0:
            receipt.collections.append(name)
            receipt.vectors += dropped
        index = self._index(group_id, create=False)
        if index is not None:
            ids = index.get(where={"session_id": session_id}, include=[])["ids"]
            if ids:
                index.delete(ids=ids)
            receipt.vectors += len(ids)
            receipt.ids += ids
        log = self._log(group_id, create=False)
        if log is not None:
            ids = log.get(where={"session_id": session_id}, include=[])["ids"]
            if ids:
                log.delete(ids=ids)
            receipt.log_records += len(ids)
            receipt.ids += ids
        return receipt

    @_store_call
    def delete_group(self, group_id: str) -> DeletionReceipt:
        receipt = DeletionReceipt()
        sessions = {info.session_id for info in self.list_sessions(group_id)}
        log = self._log(group_id, create=False)
        if log is not None:
            found = log.get(where={"kind": "message"}, include=["metadatas"])
            sessions |= {str((meta or {})["session_id"]) for meta in found["metadatas"] or []}
        for session_id in sorted(sessions):
            name = partition_name(group_id, session_id)
            dropped = self._drop_collection(name)
            if dropped >= 0:
                receipt.collections.append(name)
                receipt.vectors += dropped
        for name in (index_name(group_id), log_name(group_id)):
            dropped = self._drop_collection(name)
            if dropped >= 0:
                receipt.collections.append(name)
                if name.startswith("epm-i-"):
                    receipt.vectors += dropped
                else:
                    receipt.log_records += dropped
        # Whatever else still names the group (a partition no session record lists, the group's
        # summary partition, a re-embedding left half-way) goes too.
        for name in self.group_collection_names(group_id):
            dropped = self._drop_collection(name)
            if dropped >= 0:
                receipt.collections.append(name)
                receipt.vectors += dropped
        registry = self._registry()
        if registry.get(ids=[_digest(group_id)], include=[])["ids"]:
            registry.delete(ids=[_digest(group_id)])
        return receipt

    @_store_call
    def collection_names(self) -> list[str]:
        return sorted(collection.name for collection in self._client.list_collections())

    # -- lifecycle: summary journal, metadata repair, sweeps, re-embedding (memory.lifecycle) ----------

    @_store_call
    def put_log_record(self, group_id: str, record_id: str, document: str, metadata: dict[str, Any]) -> None:
        log = self._log(group_id)
        assert log is not None
        log.upsert(ids=[record_id], embeddings=_placeholders(1), documents=[document], metadatas=[metadata])

    @_store_call
    def log_records(self, group_id: str, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        log = self._log(group_id, create=False)
        return [] if log is None else list(self._get_all(log, where={"kind": kind}))

    @_store_call
    def delete_log_records(self, group_id: str, ids: Sequence[str]) -> int:
        log = self._log(group_id, create=False)
        if log is None or not ids:
            return 0
        existing = log.get(ids=list(ids), include=[])["ids"]
        if existing:
            log.delete(ids=existing)
        return len(existing)

    @_store_call
    def remove_vector_metadata_keys(
        self, group_id: str, session_id: str, ids: Sequence[str], keys: Sequence[str]
    ) -> None:
        """Drop metadata keys (Chroma removes a key updated to None; upsert alone would merge)."""
        if ids and keys:
            cleared: Any = [dict.fromkeys(keys) for _ in ids]
            self.update_vector_metadata(group_id, session_id, ids, cleared)

    @_store_call
    def epimem_collections(self, group_id: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Name and metadata of every epimem collection (of one group), read without the model check."""
        found = []
        for collection in self._client.list_collections():
            metadata = dict(collection.metadata or {})
            if "epimem" not in metadata or (group_id is not None and metadata.get("group_id") != group_id):
                continue
            found.append((collection.name, metadata))
        return sorted(found)

    def group_collection_names(self, group_id: str) -> list[str]:
        return [name for name, _ in self.epimem_collections(group_id)]

    @_store_call
    def read_collection(self, name: str) -> list[VectorRecord]:
        """Every record of a collection with its stored embedding, without the model check."""
        collection = self._client.get_collection(name, embedding_function=None)
        records: list[VectorRecord] = []
        offset = 0
        while True:
            page = collection.get(include=["documents", "metadatas"], limit=_GET_PAGE, offset=offset)
            for record_id, document, metadata in zip(
                page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True
            ):
                records.append(VectorRecord(id=record_id, document=document or "", metadata=dict(metadata or {})))
            if len(page["ids"]) < _GET_PAGE:
                return records
            offset += _GET_PAGE

    @_store_call
    def rebuild_collection(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Replace a collection by one built with the current model (an explicit re-embed only).

        The new vectors go to ``<name>-rebuild`` first; only when it is complete is the old
        collection dropped and the new one renamed, so an interruption never loses the records
        (``finish_rebuilds`` completes a rename that was cut short).
        """
        old = self._client.get_collection(name, embedding_function=None)
        metadata = {**(old.metadata or {}), "epimem_model": self._model_id}
        temporary = f"{name}-rebuild"
        self._drop_collection(temporary)  # an earlier attempt that did not finish; the original is intact
        new = self._client.create_collection(temporary, metadata=metadata, embedding_function=None)
        for start in range(0, len(records), _GET_PAGE):
            batch = records[start : start + _GET_PAGE]
            new.upsert(
                ids=[record.id for record in batch],
                embeddings=np.stack([cast(np.ndarray, record.embedding) for record in batch]),
                documents=[record.document for record in batch],
                metadatas=cast(Any, [record.metadata for record in batch]),
            )
        self._drop_collection(name)
        new.modify(name=name)

    @_store_call
    def finish_rebuilds(self) -> list[str]:
        """Complete rebuilds whose rename was interrupted; drop rebuilds whose original still exists."""
        names = {collection.name for collection in self._client.list_collections()}
        finished = []
        for temporary in sorted(name for name in names if name.endswith("-rebuild")):
            original = temporary.removesuffix("-rebuild")
            if original in names:
                self._drop_collection(temporary)
            else:
                self._forget(original)
                self._client.get_collection(temporary, embedding_function=None).modify(name=original)
                finished.append(original)
        return finished

    @_store_call
    def drop_log_if_empty(self, group_id: str) -> bool:
        """Drop a group's log that holds nothing (e.g. re-created only by a lease release after a delete)."""
        log = self._log(group_id, create=False)
        if log is None or log.count():
            return False
        return self._drop_collection(log_name(group_id)) >= 0

    def forget_handles(self, names: Iterable[str] | None = None) -> None:
        """Drop cached collection handles (all of them, or the named ones)."""
        self.connection.forget(names)

    def cached_handles(self) -> list[str]:
        return self.connection.cached()

    # -- first-writer-wins inserts and formation leases (memory.coordination) --------------------

    @_store_call
    def insert_messages(self, group_id: str, messages: Sequence[StoredMessage]) -> None:
        """Add message records that are not there yet. Chroma ignores ``add`` of an existing id, so a
        concurrent duplicate never overwrites a record whose state has moved on (FORMING, DONE)."""
        if not messages:
            return
        log = self._log(group_id)
        assert log is not None
        log.add(**_log_columns(messages))

    @_store_call
    def lease_records(self, group_id: str, session_id: str) -> list[dict[str, Any]]:
        log = self._log(group_id, create=False)
        if log is None:
            return []
        where = {"$and": [{"kind": "lease"}, {"lease_of": session_id}]}
        return [dict(meta or {}) for meta in log.get(where=cast(Any, where), include=["metadatas"])["metadatas"] or []]

    @_store_call
    def put_lease(
        self, group_id: str, session_id: str, epoch: int, metadata: dict[str, Any], *, insert: bool = False
    ) -> None:
        """``insert``: first writer of this epoch wins (``add``); otherwise the holder's update."""
        log = self._log(group_id)
        assert log is not None
        write = log.add if insert else log.upsert
        write(
            ids=[_lease_record_id(session_id, epoch)],
            embeddings=_placeholders(1),
            documents=[""],
            metadatas=[{**metadata, "kind": "lease", "lease_of": session_id}],
        )

    @_store_call
    def delete_leases(self, group_id: str, session_id: str, epochs: Sequence[int]) -> None:
        log = self._log(group_id, create=False)
        if log is not None and epochs:
            log.delete(ids=[_lease_record_id(session_id, epoch) for epoch in epochs])


def _lease_record_id(session_id: str, epoch: int) -> str:
    return f"lease-{_digest(session_id)[:40]}-{epoch:012d}"
