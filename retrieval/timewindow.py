"""Natural-language time windows ("last week", "in March 2023", "2 days ago") resolved
against a reference time in a timezone. Windows are half-open: [start, end).

``parse_time_window`` reads a phrase that is only a time; ``time_mentions`` finds the times a
free-text query names ("What did Maria donate on 3 June, 2023?", "... in June?", "... last week?").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memory.errors import InvalidInputError
from memory.timeutil import shift

_MONTHS = {
    name: index
    for index, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twelve": 12,
}
_UNIT = r"(day|week|month|year)s?"
_COUNT = r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|twelve)"


@dataclass(frozen=True)
class TimeWindow:
    start: datetime | None
    end: datetime | None

    def contains(self, moment: datetime) -> bool:
        return (self.start is None or moment >= self.start) and (self.end is None or moment < self.end)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise InvalidInputError(f"unknown timezone {name!r}") from error


def _day_start(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(year: int, month: int, tz: ZoneInfo) -> datetime:
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return datetime(year, month, 1, tzinfo=tz)


def _count(raw: str) -> int:
    return int(raw) if raw.isdigit() else _NUMBERS[raw]


def _unit_window(now: datetime, unit: str, offset: int) -> tuple[datetime, datetime]:
    """The calendar day/week/month/year ``offset`` units from the one containing ``now``."""
    tz = now.tzinfo
    if unit == "day":
        start = _day_start(now) + timedelta(days=offset)
        return start, start + timedelta(days=1)
    if unit == "week":
        start = _day_start(now) - timedelta(days=now.weekday()) + timedelta(weeks=offset)
        return start, start + timedelta(weeks=1)
    if unit == "month":
        start = _month_start(now.year, now.month + offset, tz)  # type: ignore[arg-type]
        return start, _month_start(start.year, start.month + 1, tz)  # type: ignore[arg-type]
    start = datetime(now.year + offset, 1, 1, tzinfo=tz)
    return start, datetime(now.year + offset + 1, 1, 1, tzinfo=tz)


def parse_time_window(text: str, *, reference: datetime | None = None, timezone: str = "UTC") -> TimeWindow:
    """Resolve a natural-language window. Raises InvalidInputError for text it cannot read."""
    tz = zone(timezone)
    phrase = " ".join(text.lower().replace(",", " ").split())
    phrase = re.sub(r"^(in|during|on|from|over|within|for)\s+(the\s+)?", "", phrase)
    try:
        now = (reference or datetime.now(UTC)).astimezone(tz)
        window = _parse(phrase, now, tz)
        resolved = _utc_window(*window) if window is not None else None
    except (OverflowError, ValueError) as error:  # past year 1 or 9999 (datetime's range)
        raise InvalidInputError(
            f"the time window {text!r} reaches outside the years 1 to 9999 that epimem can represent"
        ) from error
    if resolved is None:
        raise InvalidInputError(
            f"cannot read the time window {text!r}; try 'yesterday', 'last week', '3 days ago', "
            "'past 2 weeks', 'in March 2023', '2023' or an ISO date"
        )
    return resolved


def _utc_window(start: datetime | None, end: datetime | None) -> TimeWindow:
    return TimeWindow(start=start.astimezone(UTC) if start else None, end=end.astimezone(UTC) if end else None)


def _parse(phrase: str, now: datetime, tz: ZoneInfo) -> tuple[datetime | None, datetime | None] | None:
    fixed = {"today": ("day", 0), "yesterday": ("day", -1), "tomorrow": ("day", 1)}
    if phrase in fixed:
        return _unit_window(now, *fixed[phrase])
    if match := re.fullmatch(r"(this|last|previous|next)\s+(day|week|month|year)", phrase):
        offset = {"this": 0, "last": -1, "previous": -1, "next": 1}[match.group(1)]
        return _unit_window(now, match.group(2), offset)
    if match := re.fullmatch(rf"{_COUNT}\s+{_UNIT}\s+ago", phrase):
        unit = match.group(2)
        moment = shift(now, unit, -_count(match.group(1)))
        return (
            _unit_window(moment, unit if unit != "year" else "year", 0)
            if unit != "day"
            else _unit_window(moment, "day", 0)
        )
    if match := re.fullmatch(rf"(?:the\s+)?(?:past|last)\s+{_COUNT}\s+{_UNIT}", phrase):
        return shift(now, match.group(2), -_count(match.group(1))), now
    if match := re.fullmatch(r"(last\s+)?(" + "|".join(_WEEKDAYS) + r")", phrase):
        target = _WEEKDAYS.index(match.group(2))
        back = (now.weekday() - target) % 7 or 7
        return _unit_window(now - timedelta(days=back), "day", 0)
    if match := re.fullmatch(r"([a-z]+)\s+(\d{4})", phrase):
        if match.group(1) in _MONTHS:
            start = _month_start(int(match.group(2)), _MONTHS[match.group(1)], tz)
            return start, _month_start(start.year, start.month + 1, tz)
    if match := re.fullmatch(r"[a-z]+", phrase):
        if phrase in _MONTHS:  # a bare month: its latest occurrence not after now
            year = now.year if _MONTHS[phrase] <= now.month else now.year - 1
            start = _month_start(year, _MONTHS[phrase], tz)
            return start, _month_start(start.year, start.month + 1, tz)
    if match := re.fullmatch(r"(\d{4})", phrase):
        return datetime(int(phrase), 1, 1, tzinfo=tz), datetime(int(phrase) + 1, 1, 1, tzinfo=tz)
    if match := re.fullmatch(r"(\d{4})-(\d{2})", phrase):
        if not 1 <= int(match.group(2)) <= 12:
            return None
        start = _month_start(int(match.group(1)), int(match.group(2)), tz)
        return start, _month_start(start.year, start.month + 1, tz)
    if match := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", phrase):
        try:
            start = datetime(int(match.group(1)), int(match.group(2)), int(match.group(3)), tzinfo=tz)
        except ValueError:
            return None
        return start, start + timedelta(days=1)
    if match := re.fullmatch(r"(\d{1,2})\s+([a-z]+)\s+(\d{4})|([a-z]+)\s+(\d{1,2})\s+(\d{4})", phrase):
        day_text, month, year_text = (
            (match.group(1), match.group(2), match.group(3))
            if match.group(1)
            else (match.group(5), match.group(4), match.group(6))
        )
        if month in _MONTHS:
            try:
                start = datetime(int(year_text), _MONTHS[month], int(day_text), tzinfo=tz)
            except ValueError:
                return None
            return start, start + timedelta(days=1)
    return None


# -- times named inside a query ---------------------------------------------------------------------

_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_FULL_MONTH = "|".join(name for name in _MONTHS if len(name) > 3 and name != "sept")
_ORDINAL = r"(?:st|nd|rd|th)?"
# In priority order: a longer, more precise mention wins over the shorter ones inside it.
_MENTIONS = [
    re.compile(rf"\b(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?({_MONTH})\.?\s*,?\s*(\d{{4}})\b"),  # 3 June, 2023
    re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}}){_ORDINAL}\s*,?\s*(\d{{4}})\b"),  # October 13, 2023
    re.compile(r"\b\d{4}-\d{2}(?:-\d{2})?\b"),  # 2023-06-03, 2023-06
    re.compile(rf"\b({_MONTH})\.?\s*,?\s+(\d{{4}})\b"),  # June 2023
    re.compile(r"\b(?:yesterday|today|(?:this|last|previous)\s+(?:week|month|year))\b"),
    re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b|\b(?:past|last)\s+{_COUNT}\s+{_UNIT}\b"),
    re.compile(r"\blast\s+(?:" + "|".join(_WEEKDAYS) + r")\b"),
    re.compile(r"\b(?:19|20)\d{2}\b"),  # 2023
]
# A bare month names that month of any year; "may" only after a preposition (it is also a verb).
_BARE_MONTH = re.compile(rf"\b(?:(?:in|during|of|since|until|by|from|through)\s+(may)|({_FULL_MONTH}))\b")


@dataclass(frozen=True)
class TimeMention:
    """A time a query names: a window, or a month of any year (a bare "June")."""

    phrase: str
    window: TimeWindow | None = None
    month: int | None = None
    timezone: str = "UTC"

    def covers(self, moment: datetime) -> bool:
        if self.window is not None:
            return self.window.contains(moment)
        return moment.astimezone(zone(self.timezone)).month == self.month


def time_mentions(text: str, *, reference: datetime | None = None, timezone: str = "UTC") -> list[TimeMention]:
    """The times ``text`` names, each read as ``parse_time_window`` reads it (relative ones against
    ``reference``, default now, in ``timezone``); an impossible date ("31 February 2023") is read as the
    month it names."""
    tz = zone(timezone)
    try:
        now = (reference or datetime.now(UTC)).astimezone(tz)
    except OverflowError:  # a reference at the end of datetime's range: no time is read
        return []
    folded = text.casefold()
    taken: list[tuple[int, int]] = []
    found: list[TimeMention] = []

    def free(span: tuple[int, int]) -> bool:
        return all(span[1] <= start or end <= span[0] for start, end in taken)

    for pattern in _MENTIONS:
        for match in pattern.finditer(folded):
            if not free(match.span()):
                continue
            phrase = re.sub(rf"(\d){_ORDINAL}\b", r"\1", match.group(0))
            phrase = " ".join(re.sub(r"\bof\b|[.,]", " ", phrase).split())
            try:
                window = _parse(phrase, now, tz)
                resolved = _utc_window(*window) if window is not None else None
            except (OverflowError, ValueError):  # a time past year 9999 (or before 1) is simply not used
                taken.append(match.span())
                continue
            if resolved is None:
                continue
            taken.append(match.span())
            found.append(TimeMention(phrase=match.group(0), window=resolved, timezone=timezone))
    for match in _BARE_MONTH.finditer(folded):
        if free(match.span()):
            name = match.group(1) or match.group(2)
            found.append(TimeMention(phrase=name, month=_MONTHS[name], timezone=timezone))
    return found
