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


@pytest.mark.slow
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


def say(service: Epimem, group_id: str, session: str, number: int, when: datetime) -> None:
    """One message, not flushed: pending until its session's segment closes."""
    text = f"Pending note {number} about the lake."
    service.add_messages(group_id, session, [{"id": f"{session}-{number}", "content": text, "timestamp": when}])


def test_what_was_just_said_is_on_the_timeline_marked_pending(service: Epimem, group_id: str) -> None:
    add_episode(service, group_id, "done", 0, T0)
    say(service, group_id, "live", 1, T0 + timedelta(hours=1))
    say(service, group_id, "live", 2, T0 + timedelta(hours=1, minutes=5))
    page = service.timeline(group_id)
    assert [e.session_id for e in page.episodes] == ["done", "live"]
    opened = page.episodes[1]
    assert page.pending == [opened.uuid] and opened.boundary_reason.value == "open"
    assert opened.source_message_ids == ("live-1", "live-2") and "Pending note 2" in opened.content
    assert opened.timestamp == T0 + timedelta(hours=1)  # at its first message
    # Search sees the same open episode, under the same id.
    hits = service.search(group_id, "pending note about the lake")
    assert any(hit.pending and hit.episode.uuid == opened.uuid for hit in hits)
    # Scope and window hold it as they hold any episode.
    assert service.timeline(group_id, session_id="live").pending == [opened.uuid]
    assert service.timeline(group_id, session_id="done").pending == []
    assert service.timeline(group_id, end=T0 + timedelta(minutes=30)).pending == []
    assert [e.uuid for e in service.timeline(group_id, order="desc").episodes][0] == opened.uuid
    # Once formed, the episode takes its place and nothing is pending.
    service.flush(group_id, "live")
    formed = service.timeline(group_id)
    assert formed.pending == [] and [e.session_id for e in formed.episodes] == ["done", "live"]
    assert formed.episodes[1].source_message_ids == ("live-1", "live-2")


@pytest.mark.slow
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_paging_stays_stable_when_a_pending_episode_forms_between_pages(
    service: Epimem, group_id: str, order: str
) -> None:
    # Formed episodes at 0, 1, 3 and 4 hours; the session "live" is pending from 2 hours on.
    for n, hours in enumerate((0, 1, 3, 4)):
        add_episode(service, group_id, "s", n, T0 + timedelta(hours=hours))
    say(service, group_id, "live", 1, T0 + timedelta(hours=2))
    say(service, group_id, "live", 2, T0 + timedelta(hours=2, minutes=5))
    everything = service.timeline(group_id, order=order).episodes
    position = [e.session_id for e in everything].index("live")
    # The open episode is the last item of the first page, or the first of the next one.
    for limit in (position + 1, position):
        service.delete_session(group_id, "live")
        say(service, group_id, "live", 1, T0 + timedelta(hours=2))
        say(service, group_id, "live", 2, T0 + timedelta(hours=2, minutes=5))
        first = service.timeline(group_id, limit=limit, order=order)
        shown_pending = bool(first.pending)
        assert shown_pending == (limit == position + 1)
        service.flush(group_id, "live")  # the pending messages form an episode between two pages
        rest: list[str] = []
        cursor = first.next_cursor
        while cursor is not None:
            page = service.timeline(group_id, limit=2, cursor=cursor, order=order)
            rest += [e.uuid for e in page.episodes]
            cursor = page.next_cursor
        seen = [e.uuid for e in first.episodes] + rest
        assert len(seen) == len(set(seen))  # nothing repeated
        formed = [e.uuid for e in service.timeline(group_id, session_id="live").episodes]
        originals = [e.uuid for e in everything if e.session_id == "s"]
        assert [u for u in seen if u in set(originals)] == originals  # nothing skipped
        # What was said is shown once: as the open episode before the cursor passed it, else as its episode.
        assert (set(formed) & set(rest)) == (set() if shown_pending else set(formed))
