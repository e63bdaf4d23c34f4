"""Domain models: validation, immutability, UTC timestamps from any format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from memory.errors import InvalidInputError
from memory.models import Episode, MemoryContext, Message, SessionInfo
from memory.timeutil import EARLIEST, LATEST, parse_timestamp


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2023-05-08T13:56:00", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("2023-05-08T13:56:00Z", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("2023-05-08T15:56:00+02:00", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("Mon, 08 May 2023 13:56:00 GMT", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        (1683554160, datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        (253402214399, datetime(9999, 12, 30, 23, 59, 59, tzinfo=UTC)),  # a number is always seconds
        (datetime(2023, 5, 8, 13, 56), datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
    ],
)
def test_timestamps_in_any_format_become_utc(raw: object, expected: datetime) -> None:
    parsed = parse_timestamp(raw)
    assert parsed == expected and parsed.tzinfo == UTC


# 1683554160000: milliseconds, which seconds would put past year 9999 (one rule: numbers are seconds).
@pytest.mark.parametrize(
    "raw", ["", "not a date", "2023-13-45", True, None, float("nan"), 10**30, [1], 1683554160000, 253402300799]
)
def test_unreadable_timestamps_are_refused(raw: object) -> None:
    with pytest.raises(InvalidInputError):
        parse_timestamp(raw)


PLUS_FIVE = timezone(timedelta(hours=5))


def _local(instant: datetime) -> datetime:
    """The wall time at +05:00 of a UTC instant, naive (how hypothesis bounds its datetimes)."""
    return instant.astimezone(PLUS_FIVE).replace(tzinfo=None)


@given(st.datetimes(min_value=_local(EARLIEST), max_value=_local(LATEST), timezones=st.just(PLUS_FIVE)))
def test_any_offset_converts_to_the_same_instant(moment: datetime) -> None:
    message = Message(id="x", content="hi", timestamp=moment)
    assert message.timestamp.tzinfo == UTC
    assert message.timestamp == moment


def test_an_offset_that_moves_a_time_out_of_range_is_refused() -> None:
    for outside in (EARLIEST - timedelta(microseconds=1), datetime(1, 1, 1, tzinfo=UTC)):
        with pytest.raises(ValidationError, match="out of range"):
            Message(id="x", content="hi", timestamp=outside.astimezone(PLUS_FIVE))


def test_message_validation() -> None:
    with pytest.raises(ValidationError):
        Message(id="", content="hi")
    with pytest.raises(ValidationError):
        Message(id="x", content="   ")
    with pytest.raises(ValidationError):
        Message(id="a\x00b", content="hi")
    with pytest.raises(ValidationError):
        Message.model_validate({"id": "x", "content": "hi", "unknown": 1})
    message = Message(id="x", content="hi", producer_id="ana")
    with pytest.raises(ValidationError):
        message.content = "changed"  # type: ignore[misc]
    assert message.speaker == "ana"


def test_memory_context_is_equal_and_hashed_on_group_and_session_only() -> None:
    a = MemoryContext(group_id="g", session_id="s", agent_ids=frozenset({"bot"}))
    b = MemoryContext(group_id="g", session_id="s", user_ids=frozenset({"ana"}))
    c = MemoryContext(group_id="g", session_id="other")
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2


def test_episode_json_uses_source_message_ids() -> None:
    episode = Episode(
        title="t",
        content="c",
        timestamp="2023-05-08T13:56:00",
        group_id="g",
        session_id="s",
        source_message_ids=("1", "2"),
        message_count=2,
        boundary_reason="flush",
        generation="offline",
    )
    data = episode.model_dump(mode="json")
    assert data["source_message_ids"] == ["1", "2"]
    assert data["timestamp"] == "2023-05-08T13:56:00Z"
    assert {"uuid", "episode_type", "content_type", "producer_id", "produced_for_id", "user_metadata"} <= set(data)


def test_scope_ids_are_bounded() -> None:
    SessionInfo(group_id="g" * 500, session_id="s")
    with pytest.raises(ValidationError):
        SessionInfo(group_id="g" * 501, session_id="s")
