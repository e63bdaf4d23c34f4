"""Timestamps: everything inside epimem is timezone-aware UTC."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from dateutil import parser as date_parser

from memory.errors import InvalidInputError

# Accepted timestamps leave a day to the ends of what datetime can hold (years 1 and 9999), so that a
# timezone conversion or "the day after" of an accepted time never overflows.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
_RANGE = "timestamps must lie between 0001-01-02 and 9999-12-30 (UTC)"


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC (InvalidInputError when the
    converted time falls outside what datetime can hold, e.g. 0001-01-01T00:00+01:00)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError as error:
        raise InvalidInputError(f"timestamp out of range: {_RANGE}") from error


def _in_range(value: datetime) -> datetime:
    if not EARLIEST <= value <= LATEST:
        raise InvalidInputError(f"timestamp out of range ({value.isoformat()}): {_RANGE}")
    return value


def parse_timestamp(value: object) -> datetime:
    """Parse a timestamp given as datetime, epoch seconds or text in any common format.

    A number is always seconds since 1970-01-01 UTC (253402300799 is 9999-12-31, not a reading as
    milliseconds): a milliseconds value lands far past year 9999 and is refused.

    Raises InvalidInputError with a message that names the value when it cannot be read or lies
    outside ``EARLIEST``..``LATEST``.
    """
    return _in_range(_parse(value))


def _parse(value: object) -> datetime:
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, bool):
        raise InvalidInputError(f"timestamp must be a date/time, not a boolean: {value!r}")
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise InvalidInputError(f"timestamp is not a finite number: {value!r}")
        try:
            return datetime.fromtimestamp(number, UTC)
        except (OverflowError, OSError, ValueError) as error:
            raise InvalidInputError(
                f"timestamp out of range: {value!r} (a number is seconds since 1970; divide milliseconds by 1000)"
            ) from error
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 100:
            raise InvalidInputError(f"cannot read timestamp {value[:100]!r}")
        try:
            return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except InvalidInputError:
            raise
        except ValueError:
            pass
        try:
            parsed = date_parser.parse(text, fuzzy=False)
        except (ValueError, OverflowError) as error:
            raise InvalidInputError(f"cannot read timestamp {text!r}") from error
        return to_utc(parsed)
    raise InvalidInputError(f"timestamp must be a string, number or datetime, not {type(value).__name__}")


def to_epoch(value: datetime) -> float:
    return to_utc(value).timestamp()


def from_epoch(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def format_date(value: datetime) -> str:
    """Human date used in episode text and context: '8 May 2023, 13:56 UTC'."""
    value = to_utc(value)
    return f"{value.day} {value:%B %Y}, {value:%H:%M} UTC"


def shift(moment: datetime, unit: str, amount: int) -> datetime:
    """``moment`` moved by ``amount`` days, weeks, months or years (``unit``); a month or year shift
    keeps the day of the month, at most the 28th."""
    if unit == "day":
        return moment + timedelta(days=amount)
    if unit == "week":
        return moment + timedelta(weeks=amount)
    if unit == "month":
        index = moment.month - 1 + amount
        return moment.replace(year=moment.year + index // 12, month=index % 12 + 1, day=min(moment.day, 28))
    if unit == "year":
        return moment.replace(year=moment.year + amount, day=min(moment.day, 28))
    raise ValueError(f"unknown calendar unit {unit!r}")
