"""The offline episode generator: deterministic, no network, built from the messages themselves."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta

from memory.models import Episode, GenerationMethod, Segment
from memory.timeutil import format_date, utc_now

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]{2,}")
_STOPWORDS = frozenset(
    """about above after again against all also always and any are aren around because been before
    being below between both but can cannot could did didn does doesn doing don down during each
    even ever every few for from further get gets getting got had has have having her here hers
    herself him himself his how into its itself just know like lot made make many maybe more most
    much must myself need never new now off once one only other our ours ourselves out over own
    really right said same say says see she should so some something such sure than thank thanks
    that the their theirs them themselves then there these they thing things think this those
    though through too under until very want was way well were what when where which while who
    whom why will with would yeah yes yet you your yours yourself yourselves going great good
    love glad hey wow awesome amazing totally feel felt time today yesterday tomorrow let lets
    i'm it's that's you're i've i'll i'd we're they're can't don't didn't doesn't isn't wasn't""".split()
)

_RELATIVE_DAYS = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}
_RELATIVE_DAY_PATTERN = re.compile(r"\b(yesterday|today|tonight|tomorrow)\b", re.IGNORECASE)
_AGO_PATTERN = re.compile(r"\b(\d+|a|one|two|three|four|five|six|seven)\s+(day|week|month|year)s?\s+ago\b", re.I)
_LAST_PATTERN = re.compile(r"\b(last|next)\s+(week|month|year|weekend)\b", re.IGNORECASE)
_NUMBER_WORDS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}

MAX_TITLE_CHARS = 120


def _day(value: datetime) -> str:
    return f"{value.day} {value:%B %Y}"


def _shift(when: datetime, unit: str, amount: int) -> datetime:
    if unit == "day":
        return when + timedelta(days=amount)
    if unit in ("week", "weekend"):
        return when + timedelta(weeks=amount)
    if unit == "month":
        month_index = when.month - 1 + amount
        year = when.year + month_index // 12
        return when.replace(year=year, month=month_index % 12 + 1, day=min(when.day, 28))
    return when.replace(year=when.year + amount, day=min(when.day, 28))


def resolve_relative_dates(text: str, when: datetime) -> str:
    """Annotate relative expressions with the absolute date they mean: 'yesterday (7 May 2023)'."""

    def days(match: re.Match[str]) -> str:
        return f"{match.group(0)} ({_day(when + timedelta(days=_RELATIVE_DAYS[match.group(1).lower()]))})"

    def ago(match: re.Match[str]) -> str:
        raw = match.group(1).lower()
        amount = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
        unit = match.group(2).lower()
        target = _shift(when, unit, -amount)
        label = _day(target) if unit in ("day", "week") else f"{target:%B %Y}" if unit == "month" else str(target.year)
        return f"{match.group(0)} ({label})"

    def last_next(match: re.Match[str]) -> str:
        sign = -1 if match.group(1).lower() == "last" else 1
        unit = match.group(2).lower()
        target = _shift(when, unit, sign)
        if unit in ("week", "weekend"):
            label = f"week of {_day(target - timedelta(days=target.weekday()))}"
        elif unit == "month":
            label = f"{target:%B %Y}"
        else:
            label = str(target.year)
        return f"{match.group(0)} ({label})"

    text = _RELATIVE_DAY_PATTERN.sub(days, text)
    text = _AGO_PATTERN.sub(ago, text)
    return _LAST_PATTERN.sub(last_next, text)


def main_subject(segment: Segment, *, limit: int = 4) -> list[str]:
    """The segment's most telling words: frequent, not stopwords, not the speakers' own names."""
    speakers = {message.speaker.lower() for message in segment.messages}
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for message in segment.messages:
        for word in _WORD.findall(message.content):
            key = word.lower()
            if key in _STOPWORDS or key in speakers:
                continue
            counts[key] += 1
            first_seen.setdefault(key, len(first_seen))
    ranked = sorted(counts, key=lambda key: (-counts[key], first_seen[key]))
    return ranked[:limit]


def _speakers(segment: Segment) -> list[str]:
    seen: dict[str, None] = {}
    for message in segment.messages:
        seen.setdefault(message.speaker, None)
    return list(seen)


def offline_title(segment: Segment) -> str:
    speakers = " and ".join(_speakers(segment)[:3])
    subject = ", ".join(main_subject(segment)) or "conversation"
    return f"{speakers}: {subject}"[:MAX_TITLE_CHARS]


def offline_content(segment: Segment) -> str:
    """Third person, who said what and when, relative dates made absolute."""
    lines: list[str] = []
    current_day = ""
    for message in sorted(segment.messages, key=lambda m: m.timestamp):
        day = _day(message.timestamp)
        if day != current_day:
            lines.append(f"On {format_date(message.timestamp)}:")
            current_day = day
        text = " ".join(message.content.split())
        text = resolve_relative_dates(text, message.timestamp)
        target = f" to {message.produced_for_id}" if message.produced_for_id else ""
        caption = message.metadata.get("image_caption") if isinstance(message.metadata, dict) else None
        shared = f" [shared an image: {caption}]" if caption else ""
        lines.append(f"{message.speaker} said{target}: {text}{shared}")
    return "\n".join(lines)


def generate_offline_episode(
    segment: Segment,
    *,
    group_id: str,
    session_id: str,
    episode_id: str,
    method: GenerationMethod = GenerationMethod.OFFLINE,
) -> Episode:
    first = segment.messages[0]
    return Episode(
        uuid=episode_id,
        title=offline_title(segment),
        content=offline_content(segment),
        timestamp=segment.earliest,
        created_at=utc_now(),
        group_id=group_id,
        session_id=session_id,
        producer_id=first.producer_id,
        produced_for_id=first.produced_for_id,
        source_message_ids=segment.message_ids,
        message_count=len(segment.messages),
        boundary_reason=segment.boundary_reason,
        generation=method,
    )
