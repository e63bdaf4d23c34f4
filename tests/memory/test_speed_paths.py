"""The fast write paths keep the write path's guarantees: ordered background writes stop at the first
failure; batched adds, state updates and multi-partition writes store exactly what the one-by-one
paths stored (both backends); formation with an LLM plans sessions in parallel; acknowledging a
message never waits for the LLM."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from api.facade import Epimem
from memory.ingest.writer import OrderedWriter
from memory.models import Message, MessageState, StoredMessage
from memory.store.records import VectorRecord

try:  # the helpers' home after the test reorganisation
    from helpers.fake_openai import FakeOpenAI, Reply, default_responder
except ImportError:  # pragma: no cover - before it
    from tests.fake_openai import FakeOpenAI, Reply, default_responder  # type: ignore[no-redef]

T0 = datetime(2024, 2, 1, 10, 0, tzinfo=UTC)


def batch(prefix: str, count: int, *, day: int = 0) -> list[Message]:
    return [
        Message(
            id=f"{prefix}{i}",
            content=f"{prefix} message {i} about the garden and the {['lake', 'bakery', 'violin'][i % 3]}",
            producer_id=["ana", "ben"][i % 2],
            timestamp=T0 + timedelta(days=day, minutes=i),
        )
        for i in range(count)
    ]


def test_ordered_writes_run_in_order_and_stop_at_a_failure() -> None:
    seen: list[int] = []
    with OrderedWriter() as writer:
        for i in range(5):
            writer.submit(lambda i=i: (time.sleep(0.01 * (5 - i)), seen.append(i)))
    assert seen == [0, 1, 2, 3, 4]

    seen.clear()
    writer = OrderedWriter()

    def fail() -> None:
        raise RuntimeError("disk full")

    writer.submit(lambda: seen.append(1))
    writer.submit(fail)
    writer.submit(lambda: seen.append(3))  # never runs: an earlier write failed
    with pytest.raises(RuntimeError, match="disk full"):
        writer.wait()
    assert seen == [1]
    writer.__exit__(None, None, None)


def test_ingest_sessions_stores_what_adds_and_flushes_store(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service()
    sessions = {"s1": batch("a", 7), "s2": batch("b", 5, day=2)}
    episodes = service.memory.ingest_sessions(group_id, sessions)
    assert {e.session_id for e in episodes} == {"s1", "s2"}
    log = service.memory.store.log
    for session_id, messages in sessions.items():
        stored = log.list_messages(group_id, session_id)
        assert [s.message.id for s in stored] == [m.id for m in messages]
        assert all(s.state is MessageState.DONE and s.episode_id for s in stored)
        assert len({s.sequence for s in stored}) == len(stored)  # receipt order kept through the state updates
        members = [m for e in episodes if e.session_id == session_id for m in e.source_message_ids]
        assert sorted(members) == sorted(m.id for m in messages)
    assert {s.session_id for s in service.list_sessions(group_id)} == {"s1", "s2"}
    # Vectors: every message and episode in its partition and in the group index.
    assert service.vector_count(group_id) == 12 + len(episodes)
    again = service.memory.ingest_sessions(group_id, sessions)  # the same again: nothing twice
    assert again == [] and service.vector_count(group_id) == 12 + len(episodes)


def test_state_updates_never_bring_back_a_deleted_message(service: Epimem, group_id: str) -> None:
    log = service.memory.store.log
    service.add_messages(group_id, "s1", batch("a", 3))
    stored = log.list_messages(group_id, "s1")
    before = {s.message.id: (s.received_at, s.sequence) for s in stored}
    log.delete_messages(group_id, "s1", ["a1"])
    log.set_states(group_id, [s.model_copy(update={"state": MessageState.FORMING, "episode_id": "e"}) for s in stored])
    after = log.list_messages(group_id, "s1")
    assert [s.message.id for s in after] == ["a0", "a2"]
    assert all(s.state is MessageState.FORMING and s.episode_id == "e" for s in after)
    assert all((s.received_at, s.sequence) == before[s.message.id] for s in after)
    assert log.count_messages(group_id, "s1", states=[MessageState.FORMING]) == 2
    assert log.count_messages(group_id, "s1", states=[MessageState.PENDING]) == 0


def test_add_receipt_counts_pending_messages(service: Epimem, group_id: str) -> None:
    first = service.add_messages(group_id, "s1", batch("a", 3))
    second = service.add_messages(group_id, "s1", batch("a", 5))
    assert (first.pending, second.pending) == (3, 5)
    assert second.duplicates == ["a0", "a1", "a2"] and second.accepted == ["a3", "a4"]


def test_multi_partition_writes_reach_partitions_and_index(service: Epimem, group_id: str) -> None:
    vectors = service.memory.store.vectors
    rng = np.random.default_rng(1)

    def records(session: str, count: int) -> list[VectorRecord]:
        return [
            VectorRecord.of_message(
                StoredMessage(group_id=group_id, session_id=session, message=m, episode_id="e"),
                rng.standard_normal(service.embedder.dimension).astype(np.float32),
            )
            for m in batch(session, count)
        ]

    vectors.upsert_sessions(group_id, {"s1": records("s1", 3), "s2": records("s2", 4), "s3": []})
    assert vectors.count(group_id) == 7
    from memory.store.records import RecordFilter

    assert len(vectors.records(group_id, selection=RecordFilter(session_ids=("s2",)))) == 4
    assert len(vectors.records(group_id, selection=RecordFilter(session_ids=("s3",)))) == 0


def test_formation_names_the_episode_in_message_records_without_writing_their_vectors_again(
    service: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory.store.codec import message_record_id
    from memory.store.records import RecordFilter, RecordKind

    vectors = service.memory.store.vectors
    messages = batch("a", 6)
    service.add_messages(group_id, "s1", messages)  # live memory: each message's record holds its vector
    wanted = RecordFilter(kinds=(RecordKind.MESSAGE,))
    before = {r.id: r.embedding for r in vectors.records(group_id, selection=wanted, embeddings=True)}
    written: list[str] = []
    upsert_sessions = type(vectors).upsert_sessions

    def spied(store: Any, group: str, records: Any) -> None:
        written.extend(record.id for found in records.values() for record in found)
        upsert_sessions(store, group, records)

    monkeypatch.setattr(type(vectors), "upsert_sessions", spied)
    episodes = service.flush(group_id, "s1")
    ids = {message_record_id("s1", m.id) for m in messages}
    assert episodes and written and not ids & set(written)  # the episodes were written, no message record
    after = vectors.records(group_id, selection=wanted, embeddings=True)
    named = {message_record_id("s1", m): e.uuid for e in episodes for m in e.source_message_ids}
    assert {r.id: r.metadata["episode_id"] for r in after} == named and set(named) == ids
    assert all(np.array_equal(r.embedding, before[r.id]) for r in after)
    for message in messages:  # found in their episodes
        assert (
            service.search(group_id, message.content, k=1)[0].episode.uuid == named[message_record_id("s1", message.id)]
        )


class SlowLLM:
    """The stand-in OpenAI server answering every call after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.server = FakeOpenAI(lambda request: self._answer(request))
        self.delay = delay

    def _answer(self, request: dict[str, Any]) -> Reply:
        reply = default_responder(request)
        reply.delay = self.delay
        return reply


@pytest.mark.slow
def test_formation_plans_sessions_in_parallel_with_an_llm(make_service: Callable[..., Epimem], group_id: str) -> None:
    slow = SlowLLM(0.3)
    with slow.server as server:
        service = make_service(llm_base_url=server.url, llm_api_key="test", llm_concurrency=4)
        sessions = {f"s{i}": batch(f"m{i}-", 6, day=i) for i in range(4)}
        episodes = service.memory.ingest_sessions(group_id, sessions)
        assert episodes and len(server.requests) >= len(sessions) + len(episodes)
        # Several sessions were segmented (and their episodes written) at once, never more than the limit.
        # (How long it takes is measured by tests/benchmarks/llm_ingest.py, not asserted here.)
        assert 2 <= server.max_in_flight <= 4


@pytest.mark.slow
def test_acknowledging_messages_never_waits_for_the_llm(make_service: Callable[..., Epimem], group_id: str) -> None:
    slow = SlowLLM(3.0)
    with slow.server as server:
        service = make_service(background=True, llm_base_url=server.url, llm_api_key="test", auto_flush_pending=4)
        receipt = service.add_messages(group_id, "s1", batch("a", 8))  # enough to start a formation
        # Acknowledged while the formation waits for an LLM that answers in 3 s: nothing is done yet.
        assert receipt.accepted == [f"a{i}" for i in range(8)] and receipt.pending == 8
        assert not service.memory.store.log.count_messages(group_id, "s1", states=[MessageState.DONE])
        assert service.wait_idle(120)
        assert service.memory.store.log.count_messages(group_id, "s1", states=[MessageState.DONE]) > 0
