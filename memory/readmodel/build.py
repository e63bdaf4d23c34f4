"""Reading a group's read snapshot from Chroma (memory.readmodel.cache keeps it): every record of its
index as columns; for a group within the bounds also the records' unit vectors and the group's messages
(and, for a full snapshot, the records' metadata); and the group's configuration and sessions.

A big group is read in two steps when the cache asks for it (``columns_only``, then the rest in the
background): the first search after a start then waits only for the columns, not for every stored
vector and message (on a Chroma server each vector travels as JSON). A background read runs each page in
a store call of its own (``page_call``), so an engine restart or an erasure waits for a page, not for
the whole group."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.models import GroupConfiguration, Message, SessionInfo
from memory.readmodel.snapshot import (
    FULL_RECORD_BYTES,
    VECTOR_RECORD_BYTES,
    GroupSnapshot,
    Version,
    columns_snapshot,
    estimate_bytes,
)
from memory.store import codec
from memory.store.paging import PAGE

if TYPE_CHECKING:
    from memory.store.collections import Collections

PageCall = Callable[[], contextlib.AbstractContextManager[Any]]


class ReadCancelled(Exception):
    """A background read stopped between two pages (the cache is closing)."""


def read_snapshot(
    collections: Collections,
    group_id: str,
    version: Version,
    *,
    full_group_bytes: int,
    vector_group_bytes: int,
    count: int | None = None,
    columns_only: bool = False,
    page_call: PageCall | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> GroupSnapshot:
    """The group's snapshot read from Chroma, labelled ``version`` (read before the records: a write
        landing meanwhile is patched in or read again later). ``columns_only``: the columns alone, whatever
        the group's size (the snapshot is marked ``deferred`` when it would have kept more). ``count``: the
    index's count, when the caller has it. ``page_call``: each read in a store call of
        its own (a background read); without it the caller's store call covers them all."""
    call: PageCall = page_call or contextlib.nullcontext
    if count is None:
        with call():
            index = collections.vectors(group_id)
            count = index.count() if index is not None else 0
    dimension = 0
    if count * VECTOR_RECORD_BYTES <= vector_group_bytes and count:  # the dimension from one record
        with call():
            index = collections.vectors(group_id)
            first = index.get(limit=1, include=["embeddings"])["embeddings"] if index is not None else None
        dimension = len(first[0]) if first is not None and len(first) else 0
    full = count * (FULL_RECORD_BYTES + 4 * dimension) <= full_group_bytes
    vectors_kept = full or count * (VECTOR_RECORD_BYTES + 4 * dimension) <= vector_group_bytes
    deferred = columns_only and vectors_kept and count > 0
    if deferred:
        full = vectors_kept = False
    ids: list[str] = []
    documents: list[str] = []
    metadatas: list[dict[str, Any]] = []
    read: list[np.ndarray] = []  # the vectors, page by page
    include: list[Any] = ["documents", "metadatas"] + (["embeddings"] if vectors_kept else [])
    for page in _pages(lambda: collections.vectors(group_id), include, call, cancelled):
        for record_id, text, metadata in codec.rows_of(page):
            ids.append(record_id)
            documents.append(text)
            metadatas.append(metadata)
        if vectors_kept and page["ids"]:
            vectors = np.asarray(page["embeddings"], dtype=np.float32)
            dimension = vectors.shape[1]
            read.append(vectors)
    full = full and len(ids) * (FULL_RECORD_BYTES + 4 * dimension) <= full_group_bytes
    if vectors_kept and len(ids) * (VECTOR_RECORD_BYTES + 4 * dimension) > vector_group_bytes and not full:
        vectors_kept, read = False, []  # grew past the bound while it was read
    snapshot = columns_snapshot(group_id, version, ids, documents, metadatas)
    snapshot.deferred = deferred
    with call():
        log = collections.log(group_id, create=False)
        if log is not None:
            snapshot.config, snapshot.sessions = group_records(collections, log, group_id)
    if vectors_kept:
        vectors = np.concatenate(read) if read else np.zeros((0, dimension), dtype=np.float32)
        read.clear()
        snapshot.full = full
        snapshot.metadatas = metadatas if full else None
        # Row by row, as unit() divides one vector by its norm: the same float32 values, in place.
        for position, row in enumerate(vectors):
            vectors[position] = row / (float(np.linalg.norm(row)) or 1.0)
        snapshot.directions = vectors
        snapshot.messages = {}
        if log is not None:
            opened = lambda: collections.log(group_id, create=False)  # noqa: E731
            pages = _pages(opened, ["documents", "metadatas"], call, cancelled, where={"kind": "message"})
            snapshot.messages = _messages(pages, group_id)
    snapshot.nbytes = estimate_bytes(snapshot)
    return snapshot


def group_records(
    collections: Collections, log: Any, group_id: str
) -> tuple[GroupConfiguration | None, list[SessionInfo]]:
    """The group's configuration and its sessions (by creation), from its log."""
    found = codec.rows_of(log.get(ids=[codec.GROUP_RECORD_ID], include=["documents", "metadatas"]))
    config = GroupConfiguration.model_validate_json(found[0][1]) if found else None
    rows = collections.rows(log, where={"kind": "session"})
    sessions = sorted(
        (SessionInfo.model_validate_json(document) for _, document, _ in rows),
        key=lambda info: (info.created_at, info.session_id),
    )
    return config, sessions


def _pages(
    opened: Callable[[], Any], include: list[Any], call: PageCall, cancelled: Callable[[], bool], **kwargs: Any
) -> Iterator[Any]:
    """Every record of a collection, PAGE at a time (memory.store.paging.pages), each read in ``call``
    with the collection opened again (a restart between two pages replaces its handle)."""
    with call():
        collection = opened()
        ids = collection.get(include=[], **kwargs)["ids"] if collection is not None else []
    for start in range(0, len(ids), PAGE):
        if cancelled():
            raise ReadCancelled
        with call():
            collection = opened()
            page = collection.get(ids=ids[start : start + PAGE], include=include) if collection is not None else None
        if page is not None:
            yield page


def _messages(pages: Iterator[Any], group_id: str) -> dict[str, Message]:
    found: dict[str, Message] = {}
    for page in pages:
        for record_id, document, metadata in codec.rows_of(page):
            found[record_id] = codec.stored_from_log(group_id, document, metadata).message
    return found
