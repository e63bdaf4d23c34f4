"""Counting a session's pending messages from the ids this process knows (memory.store.pending_ids): the
count equals the filtered read of the log after every kind of write, a write that fails leaves no stale
count, and what another process makes pending is seen only by the filtered read, which is why the intake
uses the known ids only when no other process writes the session."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from helpers import builders

from api.facade import Epimem
from memory.models import Message, MessageState, StoredMessage
from memory.store.collections import Collections
from memory.store.log import LogStore

PENDING = [MessageState.PENDING]


def stored(
    group_id: str, session_id: str, ids: list[str], state: MessageState = MessageState.PENDING
) -> list[StoredMessage]:
    return [
        StoredMessage(
            group_id=group_id,
            session_id=session_id,
            message=Message(id=i, role="user", content=f"message {i}", timestamp=builders.T0 + timedelta(minutes=n)),
            state=state,
            sequence=n,
        )
        for n, i in enumerate(ids)
    ]


def counted(log: LogStore, group_id: str, session_id: str) -> int:
    """The count from known ids, checked against the filtered read."""
    known = log.count_messages(group_id, session_id, states=PENDING, single_writer=True)
    assert known == log.count_messages(group_id, session_id, states=PENDING)
    return known


def test_the_known_ids_count_follows_every_write(service: Epimem, group_id: str) -> None:
    store = service.memory.store
    log = store.log
    log.register_group(group_id)
    log.insert_messages(group_id, stored(group_id, "s1", ["a", "b", "c"]))
    assert counted(log, group_id, "s1") == 3  # the first count reads with the filter
    log.insert_messages(group_id, stored(group_id, "s1", ["d", "e"]))
    assert counted(log, group_id, "s1") == 5
    log.set_states(group_id, stored(group_id, "s1", ["a", "b"], MessageState.FORMING))
    assert counted(log, group_id, "s1") == 3
    log.set_states(group_id, stored(group_id, "s1", ["a", "b"]))  # a formation rolled back
    assert counted(log, group_id, "s1") == 5
    log.put_messages(group_id, stored(group_id, "s1", ["f"]))  # an import
    assert counted(log, group_id, "s1") == 6
    log.set_states(group_id, stored(group_id, "s1", ["c"], MessageState.DONE))
    log.insert_messages(group_id, stored(group_id, "s1", ["c"]))  # an insert never overwrites: c stays done
    assert counted(log, group_id, "s1") == 5
    log.delete_messages(group_id, "s1", ["d"])
    assert counted(log, group_id, "s1") == 4
    assert counted(log, group_id, "s2") == 0
    log.insert_messages(group_id, stored(group_id, "s2", ["x"]))
    assert counted(log, group_id, "s2") == 1
    store.admin.drop_session(group_id, "s1")
    assert counted(log, group_id, "s1") == 0
    assert counted(log, group_id, "s2") == 1


class _FailsAfterWriting:
    """A collection whose writes reach Chroma and then fail (a reply lost on the way back)."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._collection, name)
        if name not in {"add", "upsert", "update"}:
            return attribute

        def written_then_failed(*args: Any, **kwargs: Any) -> Any:
            attribute(*args, **kwargs)
            raise RuntimeError("the reply was lost")

        return written_then_failed


def test_a_write_that_fails_leaves_no_stale_count(
    service: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = service.memory.store.log
    log.register_group(group_id)
    log.insert_messages(group_id, stored(group_id, "s1", ["a"]))
    assert counted(log, group_id, "s1") == 1
    real: Callable[[Collections, str], Any] = Collections.written_log
    monkeypatch.setattr(Collections, "written_log", lambda self, g: _FailsAfterWriting(real(self, g)))
    with pytest.raises(RuntimeError):
        log.insert_messages(group_id, stored(group_id, "s1", ["b"]))
    monkeypatch.undo()
    assert counted(log, group_id, "s1") == 2


def test_what_another_process_makes_pending_needs_the_filtered_read(service: Epimem, group_id: str) -> None:
    log = service.memory.store.log
    log.register_group(group_id)
    log.insert_messages(group_id, stored(group_id, "s1", ["a"]))
    assert counted(log, group_id, "s1") == 1
    other = LogStore(log._collections)  # another process's log over the same collections
    other.insert_messages(group_id, stored(group_id, "s1", ["b"]))
    assert log.count_messages(group_id, "s1", states=PENDING, single_writer=True) == 1
    assert log.count_messages(group_id, "s1", states=PENDING) == 2


@pytest.mark.parametrize("coordination", ["local", "lease"])
def test_the_intake_counts_known_ids_only_without_other_writers(
    make_service: Callable[..., Epimem], group_id: str, coordination: str
) -> None:
    service = make_service(coordination=coordination)
    log = service.memory.store.log
    service.add_messages(group_id, "s1", builders.messages(2, prefix="a"))
    LogStore(log._collections).insert_messages(group_id, stored(group_id, "s1", ["elsewhere"]))
    receipt = service.add_messages(group_id, "s1", builders.messages(1, prefix="b"))
    # Leases: other servers write the session, so the count reads the log; locally nobody else does.
    assert receipt.pending == (4 if coordination == "lease" else 3)
