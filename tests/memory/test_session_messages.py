"""A session's messages are read by session and state alone (a clause on ``kind`` made Chroma read the
whole group's ids on every add, memory.store.log): exactly that session's messages come back, never its
session record or another record that names the session."""

from __future__ import annotations

from helpers import builders

from api.facade import Epimem
from memory.models import MessageState


def test_a_sessions_messages_and_counts_are_its_own(service: Epimem, group_id: str) -> None:
    log = service.memory.store.log
    service.add_messages(group_id, "s1", builders.messages(4, prefix="a"))
    service.add_messages(group_id, "s2", builders.messages(3, prefix="b"))
    service.flush(group_id, "s2")
    # Another record that names the session (as revisions and session records do), with no state.
    log.put_record(group_id, "other-record", "{}", {"kind": "revision", "session_id": "s1"})

    assert [s.message.id for s in log.list_messages(group_id, "s1")] == ["a0", "a1", "a2", "a3"]
    pending = log.list_messages(group_id, "s1", states=[MessageState.PENDING])
    assert [s.message.id for s in pending] == ["a0", "a1", "a2", "a3"]
    assert [s.message.id for s in log.list_messages(group_id, "s2")] == ["b0", "b1", "b2"]
    assert log.list_messages(group_id, "s2", states=[MessageState.PENDING, MessageState.FORMING]) == []
    assert log.count_messages(group_id, "s1", states=[MessageState.PENDING]) == 4
    assert log.count_messages(group_id, "s2", states=[MessageState.PENDING]) == 0
    assert log.count_messages(group_id, "s2", states=[MessageState.DONE]) == 3
    assert log.count_messages(group_id, "s3", states=[MessageState.PENDING]) == 0
    assert log.sessions_with_unfinished_messages(group_id) == {"s1"}
    service.flush(group_id, "s1")
    assert log.sessions_with_unfinished_messages(group_id) == set()
    assert log.count_messages(group_id, "s1", states=[MessageState.DONE]) == 4
