"""Timeline: event-time order, windows, and a cursor that neither skips nor repeats while episodes arrive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.facade import Epimem
from memory.errors import InvalidInputError

T0 = datetime(2023, 1, 2, 9, 0, tzinfo=UTC)


def add_episode(service: Epimem, group_id: str, session: str, number: int, when: datetime) -> None:
    """One single-message episode (a flush after each message)."""
    service.add_messages(
        group_id, session, [{"id": f"{session}-{number}", "content": f"Note number {number}.", "timestamp": when}]
    )
    service.flush(group_id, session)


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_cursor_is_stable_while_episodes_arrive(service: Epimem, group_id: str, order: str) -> None:
    # Two episodes share a timestamp: the cursor breaks ties by episode id.
    for n in range(6):
        add_episode(service, group_id, "s", n, T0 + timedelta(hours=n // 2 * 2))
    seen: list[str] = []
    cursor = None
    arrivals = iter(range(100, 106))
    while True:
        page = service.timeline(group_id, limit=2, cursor=cursor, order=order)
        seen += [e.uuid for e in page.episodes]
        # New episodes arrive between pages: some earlier than the cursor, some later.
        number = next(arrivals, None)
        if number is not None:
            offset = timedelta(hours=-5) if number % 2 else timedelta(hours=20)
            add_episode(service, group_id, "late", number, T0 + offset + timedelta(minutes=number))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen))  # nothing repeated
    everything = service.timeline(group_id, limit=500, order=order).episodes
    keys = [(e.timestamp, e.uuid) for e in everything]
    assert keys == sorted(keys, reverse=order == "desc")
    # Nothing skipped: every episode that existed before the first page was returned, in order.
    originals = [e.uuid for e in everything if e.session_id == "s"]
    assert [u for u in seen if u in set(originals)] == originals


def test_timeline_scope_and_window(service: Epimem, group_id: str) -> None:
    for n in range(4):
        add_episode(service, group_id, "a", n, T0 + timedelta(days=n))
        add_episode(service, group_id, "b", n, T0 + timedelta(days=n, hours=1))
    only_a = service.timeline(group_id, session_id="a").episodes
    assert [e.session_id for e in only_a] == ["a"] * 4
    window = service.timeline(group_id, start=T0 + timedelta(days=1), end=T0 + timedelta(days=3)).episodes
    assert [(e.session_id, e.timestamp.day) for e in window] == [("a", 3), ("b", 3), ("a", 4), ("b", 4)]
    listed = service.timeline(group_id, session_ids=["b"], order="desc").episodes
    assert [e.timestamp for e in listed] == sorted((e.timestamp for e in listed), reverse=True)
    assert {e.session_id for e in listed} == {"b"}


def test_bad_cursor_is_a_clear_error(service: Epimem, group_id: str) -> None:
    add_episode(service, group_id, "a", 0, T0)
    with pytest.raises(InvalidInputError, match="cursor"):
        service.timeline(group_id, cursor="not-a-cursor")
