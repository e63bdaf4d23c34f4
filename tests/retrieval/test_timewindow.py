"""Natural-language time windows, resolved against a reference time and a timezone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.errors import InvalidInputError
from retrieval.timewindow import parse_time_window, time_mentions

# Wednesday 15 March 2023, 10:00 UTC.
REF = datetime(2023, 3, 15, 10, 0, tzinfo=UTC)


def d(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("today", d(2023, 3, 15), d(2023, 3, 16)),
        ("yesterday", d(2023, 3, 14), d(2023, 3, 15)),
        ("last week", d(2023, 3, 6), d(2023, 3, 13)),
        ("this week", d(2023, 3, 13), d(2023, 3, 20)),
        ("last month", d(2023, 2, 1), d(2023, 3, 1)),
        ("last year", d(2022, 1, 1), d(2023, 1, 1)),
        ("2 days ago", d(2023, 3, 13), d(2023, 3, 14)),
        ("three days ago", d(2023, 3, 12), d(2023, 3, 13)),
        ("past 2 weeks", d(2023, 3, 1, 10), d(2023, 3, 15, 10)),
        ("in March 2023", d(2023, 3, 1), d(2023, 4, 1)),
        ("during Dec 2022", d(2022, 12, 1), d(2023, 1, 1)),
        ("in 2022", d(2022, 1, 1), d(2023, 1, 1)),
        ("2023-02", d(2023, 2, 1), d(2023, 3, 1)),
        ("on 2023-03-01", d(2023, 3, 1), d(2023, 3, 2)),
        ("8 May 2022", d(2022, 5, 8), d(2022, 5, 9)),
        ("last Monday", d(2023, 3, 13), d(2023, 3, 14)),
        ("in June", d(2022, 6, 1), d(2022, 7, 1)),  # a bare month: its latest occurrence not after now
    ],
)
def test_windows_in_utc(text: str, start: datetime, end: datetime) -> None:
    window = parse_time_window(text, reference=REF)
    assert (window.start, window.end) == (start, end)


def test_timezone_moves_the_day_boundaries() -> None:
    # 10:00 UTC is 19:00 in Tokyo (UTC+9): "yesterday" there is 14 March, 00:00-24:00 Tokyo time.
    window = parse_time_window("yesterday", reference=REF, timezone="Asia/Tokyo")
    assert window.start == d(2023, 3, 13, 15) and window.end == d(2023, 3, 14, 15)
    # 02:00 UTC on 15 March is still 14 March in New York (UTC-4 in March after DST).
    early = parse_time_window("today", reference=d(2023, 3, 15, 2), timezone="America/New_York")
    assert early.start == d(2023, 3, 14, 4) and early.end == d(2023, 3, 15, 4)


def test_half_open_window_contains() -> None:
    window = parse_time_window("yesterday", reference=REF)
    assert window.contains(d(2023, 3, 14)) and window.contains(d(2023, 3, 14, 23, 59))
    assert not window.contains(d(2023, 3, 15))


@pytest.mark.parametrize("text", ["whenever", "last fortnight", "31 February 2023", "2023-13", ""])
def test_unreadable_windows_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_time_window(text, reference=REF)


def test_unknown_timezone_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="timezone"):
        parse_time_window("today", reference=REF, timezone="Mars/Olympus")


@pytest.mark.parametrize(
    ("query", "windows"),
    [
        ("What did Maria donate on 3 June, 2023?", [(d(2023, 6, 3), d(2023, 6, 4))]),
        ("What did Tim read on 8th December, 2023?", [(d(2023, 12, 8), d(2023, 12, 9))]),
        ("What did Melanie show on October 13, 2023?", [(d(2023, 10, 13), d(2023, 10, 14))]),
        ("Where was the picture shared on December 1,2023 taken?", [(d(2023, 12, 1), d(2023, 12, 2))]),
        ("What did John host in May 2023?", [(d(2023, 5, 1), d(2023, 6, 1))]),
        ("What happened on 2023-03-01?", [(d(2023, 3, 1), d(2023, 3, 2))]),
        ("How often did she go to the beach in 2022?", [(d(2022, 1, 1), d(2023, 1, 1))]),
        (
            "What did I cook yesterday and last week?",
            [(d(2023, 3, 14), d(2023, 3, 15)), (d(2023, 3, 6), d(2023, 3, 13))],
        ),
        ("what did we plan 2 days ago", [(d(2023, 3, 13), d(2023, 3, 14))]),
        ("Who did I meet last Monday?", [(d(2023, 3, 13), d(2023, 3, 14))]),
        ("What did Caroline paint?", []),
        ("Which 3 cities are on the 10 list?", []),
    ],
)
def test_times_a_query_names(query: str, windows: list[tuple[datetime, datetime]]) -> None:
    found = time_mentions(query, reference=REF)
    assert [(m.window.start, m.window.end) for m in found if m.window] == windows
    assert all(m.month is None for m in found)


def test_a_bare_month_is_that_month_of_any_year_and_may_needs_a_preposition() -> None:
    (june,) = time_mentions("When did Melanie go camping in June?", reference=REF)
    assert june.window is None and june.month == 6
    assert june.covers(d(2019, 6, 30, 23)) and june.covers(d(2024, 6, 1)) and not june.covers(d(2023, 7, 1))
    assert time_mentions("What may Caroline paint?", reference=REF) == []
    assert [m.month for m in time_mentions("What may Caroline paint in May?", reference=REF)] == [5]
    # In Tokyo, 30 June 20:00 UTC is already 1 July.
    (tokyo,) = time_mentions("in June", reference=REF, timezone="Asia/Tokyo")
    assert not tokyo.covers(d(2023, 6, 30, 20)) and tokyo.covers(d(2023, 5, 31, 20))


def test_relative_mentions_follow_the_timezone_and_impossible_dates_fall_back() -> None:
    (yesterday,) = time_mentions("what did I do yesterday", reference=REF, timezone="Asia/Tokyo")
    assert yesterday.window == parse_time_window("yesterday", reference=REF, timezone="Asia/Tokyo")
    # No 31 February: the month it names is still a time the query names.
    (february,) = time_mentions("What happened on 31 February 2023?", reference=REF)
    assert february.window is not None and (february.window.start, february.window.end) == (
        d(2023, 2, 1),
        d(2023, 3, 1),
    )
