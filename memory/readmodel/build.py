"""Reading a group's read snapshot from the store (memory.readmodel.model keeps it): every record of its
index as columns; for a group within the bounds also the records' unit vectors and the group's messages
(and, for a full snapshot, the records' metadata); and the group's configuration and sessions.

A big group is read in two steps when the read model asks for it (``columns_only``, then the rest in the
background: memory.readmodel.upgrades): the first search after a start then waits only for the columns, not
for every stored vector and message (on a Chroma server each vector travels as JSON). Every page is a store
call of its own (memory.store.group_reads), so an engine restart or an erasure waits for a page, not for the
whole group."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from memory.readmodel.snapshot import (
    FULL_RECORD_BYTES,
    VECTOR_RECORD_BYTES,
    GroupSnapshot,
    Version,
    columns_snapshot,
    estimate_bytes,
)
from memory.store.group_reads import GroupReads
from memory.store.paging import PAGE
from memory.store.records import EPISODE_KINDS

T = TypeVar("T")


class ReadCancelled(Exception):
    """A background read stopped between two pages (the read model is closing)."""


def read_snapshot(
    reads: GroupReads,
    group_id: str,
    version: Version,
    *,
    full_group_bytes: int,
    vector_group_bytes: int,
    count: int | None = None,
    columns_only: bool = False,
    cancelled: Callable[[], bool] = lambda: False,
) -> GroupSnapshot:
    """The group's snapshot read from the store, labelled ``version`` (read before the records: a write
    landing meanwhile is patched in or read again later). ``columns_only``: the columns alone, whatever
    the group's size (the snapshot is marked ``deferred`` when it would have kept more). ``count``: the
    index's count, when the caller has it."""
    if count is None:
        count = reads.count(group_id)
    dimension = 0
    if count * VECTOR_RECORD_BYTES <= vector_group_bytes and count:  # the dimension from one record
        dimension = reads.dimension(group_id)
    full = count * (FULL_RECORD_BYTES + 4 * dimension) <= full_group_bytes
    vectors_kept = full or count * (VECTOR_RECORD_BYTES + 4 * dimension) <= vector_group_bytes
    deferred = columns_only and vectors_kept and count > 0
    if deferred:
        full = vectors_kept = False
    ids: list[str] = []
    documents: list[str] = []
    metadatas: list[dict] = []
    read: list[np.ndarray] = []  # the vectors, page by page
    pages = _pages(
        reads.index_ids(group_id), lambda ids: reads.index_page(group_id, ids, vectors=vectors_kept), cancelled
    )
    for page in pages:
        ids += page.ids
        documents += page.documents
        metadatas += page.metadatas
        if page.vectors is not None:
            dimension = page.vectors.shape[1]
            read.append(page.vectors)
    full = full and len(ids) * (FULL_RECORD_BYTES + 4 * dimension) <= full_group_bytes
    if vectors_kept and len(ids) * (VECTOR_RECORD_BYTES + 4 * dimension) > vector_group_bytes and not full:
        vectors_kept, read = False, []  # grew past the bound while it was read
    snapshot = columns_snapshot(group_id, version, ids, documents, metadatas)
    snapshot.deferred = deferred
    records = reads.group_records(group_id)
    if records is not None:
        snapshot.config, snapshot.sessions = records
    if vectors_kept:
        vectors = np.concatenate(read) if read else np.zeros((0, dimension), dtype=np.float32)
        read.clear()
        snapshot.full = full
        snapshot.metadatas = metadatas if full else None
        if not full:
            snapshot.episode_metadatas = {
                record_id: metadata
                for record_id, metadata in zip(ids, metadatas, strict=True)
                if metadata.get("kind") in EPISODE_KINDS
            }
        # Row by row, as unit() divides one vector by its norm: the same float32 values, in place.
        for position, row in enumerate(vectors):
            vectors[position] = row / (float(np.linalg.norm(row)) or 1.0)
        snapshot.directions = vectors
        snapshot.messages = {}
        if records is not None:
            found = _pages(reads.log_ids(group_id), lambda ids: reads.messages(group_id, ids), cancelled)
            snapshot.messages = {key: message for part in found for key, message in part.items()}
    snapshot.nbytes = estimate_bytes(snapshot)
    return snapshot


def _pages(ids: list[str], read: Callable[[Sequence[str]], T | None], cancelled: Callable[[], bool]) -> Iterator[T]:
    """``read`` of every PAGE of ``ids`` (memory.store.paging), those it found; ``cancelled`` is asked before
    each page."""
    for start in range(0, len(ids), PAGE):
        if cancelled():
            raise ReadCancelled
        page = read(ids[start : start + PAGE])
        if page is not None:
            yield page
