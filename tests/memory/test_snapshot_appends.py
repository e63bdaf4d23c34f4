"""Read snapshots extended by what adds appended equal snapshots read from scratch, whatever adds,
formations, deletions and flushes came between (real embedded Chroma, the real model)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from helpers.builders import messages
from helpers.checks import by_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.facade import Epimem
from memory.readmodel import snapshot as group_snapshot
from memory.readmodel.model import ReadModel
from memory.readmodel.snapshot import KIND_CODE, GroupSnapshot
from memory.store.factory import open_store

STEPS = st.lists(
    st.tuples(st.sampled_from(["add", "add", "add", "search", "flush", "delete"]), st.integers(0, 2)),
    min_size=4,
    max_size=12,
)


def same(extended: GroupSnapshot, fresh: GroupSnapshot) -> None:
    assert by_record(extended) == by_record(fresh)
    assert extended.full == fresh.full
    assert (extended.messages or {}) == (fresh.messages or {})
    assert [s.session_id for s in extended.sessions] == [s.session_id for s in fresh.sessions]


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_extended_snapshots_equal_fresh_ones(
    steps: list[tuple[str, int]], make_service: Callable[..., Epimem], backend: str
) -> None:
    if backend != "embedded":
        pytest.skip("snapshots are extended in place on embedded Chroma only (a server's stamp says nothing more)")
    service = make_service(auto_flush_pending=5)
    group = f"g-{uuid.uuid4().hex[:8]}"  # the examples share the test's data folder
    store = service.memory.store
    reader = ReadModel(open_store(store.connection, model_id=store.model_id))  # its own: reads from scratch
    counter = 0
    for action, session in steps:
        sid = f"s{session}"
        known = {info.session_id for info in service.memory.sessions(group)}
        if action == "add":
            batch = messages(2, prefix=f"{sid}-{counter}-", text="Turn {i} about the lake and the dog Rex.")
            counter += 1
            service.add_messages(group, sid, batch)
        elif action == "flush" and sid in known:
            service.flush(group, sid)
        elif action == "delete" and sid in known:
            pending = service.memory.messages(group, sid, unfinished=True)
            if pending:
                service.delete_message(group, sid, pending[0].id)
        if not service.memory.sessions(group):
            continue
        service.search(group, "the dog Rex", k=3)  # the read path takes (or extends) the snapshot here
        extended = service.read_model.snapshot(group)
        same(extended, reader.snapshot(group))


def test_an_add_to_a_known_session_extends_the_snapshot_without_reading_the_group(
    make_service: Callable[..., Epimem], backend: str, group_id: str
) -> None:
    service = make_service()
    service.add_messages(group_id, "s", messages(2, prefix="a"))
    service.search(group_id, "Rex", k=3)
    snapshots = service.read_model
    before = snapshots.stats()
    service.add_messages(group_id, "s", messages(2, prefix="b"))
    hits = service.search(group_id, "Rex", k=3)
    after = snapshots.stats()
    assert hits[0].pending and set(hits[0].episode.source_message_ids) == {"a0", "a1", "b0", "b1"}
    assert after.builds == before.builds + 1
    assert after.extensions == before.extensions + 1  # on a Chroma server too: this process's own write


def test_a_snapshot_keeps_a_bounded_number_of_parsed_episodes(
    make_service: Callable[..., Epimem], group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service()
    for session in range(5):  # an episode each
        batch = messages(4, prefix=f"s{session}-", text="Turn {i}: Rex at the lake.")
        service.add_messages(group_id, f"s{session}", batch)
        service.flush(group_id, f"s{session}")
    monkeypatch.setattr(group_snapshot, "PARSED_EPISODES_KEPT", 3)
    bounded = service.search(group_id, "Rex at the lake", k=5)
    snapshot = service.read_model.snapshot(group_id)
    assert snapshot.full and len(snapshot._episodes) <= 3
    episode_ids = [snapshot.ids[p] for p in range(len(snapshot.ids)) if snapshot.kinds[p] == KIND_CODE["episode"]]
    assert len(episode_ids) == 5
    parsed = [snapshot.episode(record_id) for record_id in episode_ids]
    assert list(snapshot._episodes) == episode_ids[-3:]  # the most recently used
    assert snapshot.episode(episode_ids[0]) == parsed[0]  # parsed again once it was let go
    monkeypatch.setattr(group_snapshot, "PARSED_EPISODES_KEPT", 4096)
    again = service.search(group_id, "Rex at the lake", k=5)
    assert [hit.episode.uuid for hit in bounded] == [hit.episode.uuid for hit in again] and bounded


def test_a_formation_keeps_the_snapshots_vectors_where_they_are(
    make_service: Callable[..., Epimem], backend: str, group_id: str
) -> None:
    """Forming episodes of live messages names their episode in their records: the patched snapshot keeps the
    unit vectors it had (no copy of the group's vectors) and appends the episodes' after them."""
    import numpy as np

    service = make_service()
    service.add_messages(group_id, "s", messages(6, prefix="a"))
    service.search(group_id, "Rex", k=3)  # read from Chroma
    service.add_messages(group_id, "s", messages(1, prefix="b"))
    service.search(group_id, "Rex", k=3)  # extended: its vectors now have room after them
    before = service.read_model.snapshot(group_id)
    assert before.directions is not None
    service.flush(group_id, "s")
    service.search(group_id, "Rex", k=3)
    after = service.read_model.snapshot(group_id)
    assert after.version != before.version and after.directions is not None
    assert len(after) > len(before) and np.shares_memory(after.directions, before.directions)
    assert np.array_equal(after.directions[: len(before)], before.directions)
    store = service.memory.store
    same(after, ReadModel(open_store(store.connection, model_id=store.model_id)).snapshot(group_id))
