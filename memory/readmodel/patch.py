"""A group's read snapshot patched with what this process's writes changed, instead of read again.

Every write of a group's records publishes what it did (a ``Change``, numbered per local version on the
connection's feed: ``memory.store.changes``); the read model applies the changes since its snapshot
(``patch``): records added, rewritten in place (upserts, replacements, metadata updates) or removed,
log messages added or removed, the group's configuration and session records read again. The result
equals a snapshot read from scratch (tests/memory/test_snapshot_patches.py) except for the stored order
of rewritten records. Derived structures that know how (``Derivation.patched``: the keyword index) are
patched too, from the ``Patch`` that says where each row of the new snapshot was in the old one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar

import numpy as np

from memory.readmodel.row_buffer import RowBuffer, appended, grown
from memory.readmodel.snapshot import (
    FULL_RECORD_BYTES,
    VECTOR_RECORD_BYTES,
    GroupSnapshot,
    Version,
    columns_snapshot,
    messages_bytes,
    rows_bytes,
)
from memory.store.changes import Change
from memory.store.records import VectorRecord

T = TypeVar("T")


@dataclass(frozen=True)
class Patch:
    """How a patched snapshot's rows relate to its predecessor's: ``old_of_new[p]`` is the old position
    of new row ``p`` (-1: a new record); ``rewritten``: new positions whose record was written again."""

    old_of_new: np.ndarray  # int64
    rewritten: np.ndarray  # int64, sorted


def fold(snapshot: GroupSnapshot, changes: Sequence[Change]) -> dict[str, VectorRecord | None]:
    """Every record the changes touched, as it is after them (None: removed), in the order first
    touched. A record read from the snapshot carries no embedding: its stored vector did not change."""
    touched: dict[str, VectorRecord | None] = {}

    def current(record_id: str) -> VectorRecord | None:
        if record_id in touched:
            return touched[record_id]
        return snapshot.record_by_id(record_id)

    for change in changes:
        for record_id in change.removed:
            touched[record_id] = None
        for record in change.records:
            base = current(record.id) if change.merge else None
            metadata = {**base.metadata, **record.metadata} if base is not None else dict(record.metadata)
            touched[record.id] = VectorRecord(record.id, record.document, metadata, record.embedding)
        for record_id, update in change.updates:
            found = current(record_id)
            if found is None:
                continue  # an update never creates a record
            metadata = {key: value for key, value in {**found.metadata, **update}.items() if value is not None}
            touched[record_id] = VectorRecord(record_id, found.document, metadata, found.embedding)
    return touched


def _take(column: Sequence[T], positions: list[int]) -> list[T]:
    if not positions:
        return []
    if len(positions) == 1:
        return [column[positions[0]]]
    return list(itemgetter(*positions)(column))


def _directions(records: list[VectorRecord]) -> np.ndarray:
    vectors = np.asarray([record.embedding for record in records], dtype=np.float32)
    for position, row in enumerate(vectors):  # as the build does: one vector over its norm, in place
        vectors[position] = row / (float(np.linalg.norm(row)) or 1.0)
    return vectors


def _patched_directions(
    snapshot: GroupSnapshot,
    removed: list[int],
    kept: np.ndarray,
    written: list[tuple[int, VectorRecord]],
    new: list[VectorRecord],
) -> tuple[np.ndarray, RowBuffer | None]:
    """The unit vectors after a patch: the same rows when no vector changed; only added ones appended
    after them in the snapshot's buffer (``RowBuffer``: no copy); otherwise a copy."""
    directions = snapshot.directions if snapshot.directions is not None else np.zeros((0, 0), dtype=np.float32)
    moved = [(p, record) for p, record in written if record.embedding is not None]
    if not removed and not moved:
        if not new:
            return directions, snapshot.row_buffer
        return appended(directions, snapshot.row_buffer, _directions(new))
    copied = directions[kept] if removed else directions.copy()
    if moved:
        copied[[p for p, _ in moved]] = _directions([record for _, record in moved])
    return grown(copied, _directions(new)) if new else (copied, None)


def patch(
    snapshot: GroupSnapshot,
    changes: Sequence[Change],
    version: Version,
    *,
    full_group_bytes: int,
    vector_group_bytes: int,
) -> tuple[GroupSnapshot, Patch] | None:
    """The snapshot with ``changes`` applied, at ``version`` (a new snapshot: readers of the old one keep
    theirs), and how its rows map to the old ones. None when it cannot be done exactly here: a full
    snapshot would grow past its size limit or lacks a new record's vector."""
    touched = fold(snapshot, changes)
    positions = snapshot.positions
    removed = sorted(positions[r] for r, record in touched.items() if record is None and r in positions)
    rewritten = {positions[r]: record for r, record in touched.items() if record is not None and r in positions}
    new = [record for r, record in touched.items() if record is not None and r not in positions]
    vectors = snapshot.directions is not None  # full, or past the full bound with vectors and messages
    if vectors:
        if any(record.embedding is None for record in new):
            return None
        # An empty group read without a vector has no dimension yet: its new records tell it.
        kept_directions = snapshot.directions if snapshot.directions is not None else np.zeros((0, 0))
        embedding = new[0].embedding if new else None
        dimension = kept_directions.shape[1] if len(kept_directions) else len(embedding) if embedding is not None else 0
        count = len(snapshot) - len(removed) + len(new)
        if snapshot.full and count * (FULL_RECORD_BYTES + 4 * dimension) > full_group_bytes:
            return None
        if not snapshot.full and count * (VECTOR_RECORD_BYTES + 4 * dimension) > vector_group_bytes:
            return None
    # The old rows kept, in their order, then the new records.
    if removed:
        keep = np.ones(len(snapshot), dtype=bool)
        keep[removed] = False
        kept = np.flatnonzero(keep)
    else:
        kept = np.arange(len(snapshot))
    kept_list = kept.tolist() if removed else []
    new_of_old = np.full(len(snapshot), -1, dtype=np.int64)
    new_of_old[kept] = np.arange(len(kept))
    written = [(int(new_of_old[p]), record) for p, record in sorted(rewritten.items())]
    added = columns_snapshot(
        snapshot.group_id,
        version,
        [record.id for _, record in written] + [record.id for record in new],
        [record.document for _, record in written] + [record.document for record in new],
        [dict(record.metadata) for _, record in written] + [dict(record.metadata) for record in new],
    )
    index = {name: code for code, name in enumerate(snapshot.session_names)}
    codes = np.asarray(
        [index.setdefault(added.session_names[int(c)], len(index)) for c in added.session_codes], dtype=np.int32
    )
    at = np.asarray([p for p, _ in written], dtype=np.int64)
    split = len(written)

    def array(old: np.ndarray, fresh: np.ndarray) -> np.ndarray:
        values = np.concatenate([old[kept] if removed else old, fresh[split:]])
        values[at] = fresh[:split]
        return values

    ids = array(snapshot.ids, added.ids)
    patched = GroupSnapshot(
        group_id=snapshot.group_id,
        version=version,
        ids=ids,
        positions={record_id: position for position, record_id in enumerate(ids)}
        if removed
        else {**positions, **{record.id: len(kept) + i for i, record in enumerate(new)}},
        documents=array(snapshot.documents, added.documents),
        kinds=array(snapshot.kinds, added.kinds),
        session_codes=array(snapshot.session_codes, codes),
        session_names=list(index),
        timestamps=array(snapshot.timestamps, added.timestamps),
        episode_ids=array(snapshot.episode_ids, added.episode_ids),
        message_ids=array(snapshot.message_ids, added.message_ids),
        producers=array(snapshot.producers, added.producers),
        produced_for=array(snapshot.produced_for, added.produced_for),
        titles=array(snapshot.titles, added.titles),
        config=snapshot.config,
        sessions=snapshot.sessions,
        full=snapshot.full,
        deferred=snapshot.deferred,
    )
    if snapshot.metadatas is not None:
        fresh_metadata = [dict(record.metadata) for _, record in written] + [dict(r.metadata) for r in new]
        metadatas = _take(snapshot.metadatas, kept_list) if removed else list(snapshot.metadatas)
        for offset, position in enumerate(at.tolist()):
            metadatas[position] = fresh_metadata[offset]
        patched.metadatas = metadatas + fresh_metadata[split:]
    if snapshot.episode_metadatas is not None:
        held = dict(snapshot.episode_metadatas)
        for record_id, record in touched.items():
            if record is not None and record.is_episode:
                held[record_id] = dict(record.metadata)
            else:
                held.pop(record_id, None)
        patched.episode_metadatas = held
    if snapshot.directions is not None:
        patched.directions, patched.row_buffer = _patched_directions(snapshot, removed, kept, written, new)
    # The size estimate moves by what the patch changed, not by a walk over every row (a full snapshot of
    # 13,600 records: 155 ms a patch).
    nbytes = snapshot.nbytes + rows_bytes(patched, [p for p, _ in written] + list(range(len(kept), len(ids))))
    nbytes -= rows_bytes(snapshot, removed + sorted(rewritten))
    if snapshot.messages is not None:
        messages = dict(snapshot.messages)
        for change in changes:
            for record_id in change.removed_messages:
                gone = messages.pop(record_id, None)
                nbytes -= messages_bytes([gone]) if gone is not None else 0
            for record_id, message in change.messages:
                before = messages.get(record_id)
                if change.insert and before is not None:
                    continue
                messages[record_id] = message
                nbytes += messages_bytes([message]) - (messages_bytes([before]) if before is not None else 0)
        patched.messages = messages
    # Episodes parsed from records the changes did not touch stay parsed.
    with snapshot._lock:  # readers of the old snapshot reorder its parsed episodes (least recently used)
        parsed = [(r, e) for r, e in snapshot._episodes.items() if r not in touched]
    patched._episodes.update(parsed)
    patched.nbytes = nbytes
    old_of_new = np.concatenate([kept, np.full(len(new), -1, dtype=np.int64)])
    return patched, Patch(old_of_new=old_of_new, rewritten=np.sort(at))


def diff(previous: GroupSnapshot, fresh: GroupSnapshot) -> Patch:
    """How a snapshot read from scratch relates to the one before it (a Chroma server: other servers'
    writes are not journaled here): rows by id; a row whose document, title, speaker or addressee
    differs counts as rewritten (what the derived structures read of it)."""
    old = previous.positions
    old_of_new = np.fromiter((old.get(record_id, -1) for record_id in fresh.ids), dtype=np.int64, count=len(fresh))
    rewritten = [
        position
        for position, before in enumerate(old_of_new.tolist())
        if before >= 0
        and (
            fresh.documents[position] != previous.documents[before]
            or fresh.titles[position] != previous.titles[before]
            or fresh.producers[position] != previous.producers[before]
            or fresh.produced_for[position] != previous.produced_for[before]
        )
    ]
    return Patch(old_of_new=old_of_new, rewritten=np.asarray(rewritten, dtype=np.int64))
