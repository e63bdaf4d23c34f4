"""The offline episode generator: deterministic, no network, built from the messages themselves."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta

from memory.models import Episode, GenerationMethod, Segment
from memory.text import image_note, squash
from memory.timeutil import format_date, shift, utc_now

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
    i'm it's that's you're i've i'll i'd we're they're can't don't didn't doesn't isn't wasn't
    cool sweet nice fun super pretty kind lots bit definitely absolutely especially actually
    hope hoping happy enjoy enjoyed keep kept tell told share sharing shared pic pics photo
    cause wanted wants trying tried try take took went come came usually hey hi hello
    let's how's what's there's here's he's she's sounds looks mean ones taking loving next last
    they've we've anything everything nothing someone""".split()
)
# Two or more capitalised words in a row ("Lake Tahoe", "Pride Parade"): names of places, events, things.
_PROPER_PHRASE = re.compile(r"\b[A-Z][a-zA-Z'\-]+(?:\s+(?:of\s+|the\s+)?[A-Z][a-zA-Z'\-]+)+")

_RELATIVE_DAYS = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}
_RELATIVE_DAY_PATTERN = re.compile(r"\b(yesterday|today|tonight|tomorrow)\b", re.IGNORECASE)
_AGO_PATTERN = re.compile(r"\b(\d+|a|one|two|three|four|five|six|seven)\s+(day|week|month|year)s?\s+ago\b", re.I)
_LAST_PATTERN = re.compile(r"\b(last|next)\s+(week|month|year|weekend)\b", re.IGNORECASE)
_NUMBER_WORDS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}

MAX_TITLE_CHARS = 120


def _day(value: datetime) -> str:
    return f"{value.day} {value:%B %Y}"


def _shift(when: datetime, unit: str, amount: int) -> datetime:
    return shift(when, "week" if unit == "weekend" else unit, amount)


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
    """The segment's most telling words and names: multi-word capitalised names first weighted
    double, then frequent words that are not stopwords nor the speakers' own names."""
    speakers = {message.speaker.lower() for message in segment.messages}
    counts: Counter[str] = Counter()
    shown: dict[str, str] = {}
    first_seen: dict[str, int] = {}
    pairs: Counter[str] = Counter()

    def add(key: str, label: str, weight: int) -> None:
        counts[key] += weight
        shown.setdefault(key, label)
        first_seen.setdefault(key, len(first_seen))

    for message in segment.messages:
        text = message.content
        for phrase in _PROPER_PHRASE.findall(text):
            words = phrase.split()
            while words and (words[0].lower() in _STOPWORDS or words[0].lower() in speakers):
                words = words[1:]  # "Hey Mel", "Last Friday"
            if len(words) >= 2:
                add(" ".join(words).lower(), " ".join(words), 2)
        for match in _WORD.finditer(text):
            word, key = match.group(0), match.group(0).lower()
            if key in _STOPWORDS or key in speakers:
                continue
            before = text[: match.start()].rstrip()
            named = word[0].isupper() and not word.isupper() and bool(before) and before[-1] not in '.!?:"'
            acronym = word.isupper() and len(word) > 1  # "LGBTQ"
            add(key, word if named or acronym else key, 1)
            if named:
                shown[key] = word
            following = text[match.end() : match.end() + 1] == " " and _WORD.match(text, match.end() + 1)
            if following and following.group(0).lower() not in _STOPWORDS | speakers:
                pairs[f"{key} {following.group(0).lower()}"] += 1
    for pair, count in pairs.items():
        if count >= 2:  # a repeated pair of content words is a subject of its own: "support group"
            add(pair, pair, 2 * count)
    ranked = sorted(counts, key=lambda key: (-counts[key], first_seen[key]))
    chosen: list[str] = []
    for key in ranked:
        if any(f" {key} " in f" {other} " or f" {other} " in f" {key} " for other in chosen):
            continue  # "tahoe" adds nothing next to "lake tahoe"
        chosen.append(key)
        if len(chosen) == limit:
            break
    return [shown[key] for key in chosen]


def _speakers(segment: Segment) -> list[str]:
    seen: dict[str, None] = {}
    for message in segment.messages:
        seen.setdefault(message.speaker, None)
    return list(seen)


def offline_title(segment: Segment) -> str:
    """'Caroline and Melanie, 8 May 2023: LGBTQ support group, painting, ...'"""
    speakers = " and ".join(_speakers(segment)[:3])
    subject = ", ".join(main_subject(segment)) or "conversation"
    return f"{speakers}, {_day(segment.earliest)}: {subject}"[:MAX_TITLE_CHARS]


def offline_content(segment: Segment) -> str:
    """Third person, who said what and when, relative dates made absolute."""
    lines: list[str] = []
    current_day = ""
    for message in sorted(segment.messages, key=lambda m: m.timestamp):
        day = _day(message.timestamp)
        if day != current_day:
            lines.append(f"On {format_date(message.timestamp)}:")
            current_day = day
        text = resolve_relative_dates(squash(message.content), message.timestamp)
        target = f" to {message.produced_for_id}" if message.produced_for_id else ""
        lines.append(f"{message.speaker} said{target}: {text}{image_note(message)}")
    return "\n".join(lines)


def generate_offline_episode(
    segment: Segment,
    *,
    group_id: str,
    session_id: str,
    episode_id: str,
    method: GenerationMethod = GenerationMethod.OFFLINE,
) -> Episode:
    return episode_from_segment(
        segment,
        group_id=group_id,
        session_id=session_id,
        episode_id=episode_id,
        title=offline_title(segment),
        content=offline_content(segment),
        timestamp=segment.earliest,
        method=method,
    )


def episode_from_segment(
    segment: Segment,
    *,
    group_id: str,
    session_id: str,
    episode_id: str,
    title: str,
    content: str,
    timestamp: datetime,
    method: GenerationMethod,
) -> Episode:
    """The episode of a segment, whoever wrote its title and content: scope, sources and counts
    always come from the segment itself."""
    first = segment.messages[0]
    return Episode(
        uuid=episode_id,
        title=title,
        content=content,
        timestamp=timestamp,
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
