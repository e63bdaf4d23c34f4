"""Excerpts: the part of a long message that matters to a query, cited by its character span.

A message is cut into units at paragraph, line and sentence ends (a unit longer than the excerpt is cut at
whitespace). Each unit is scored by the query's words it holds (the keyword index's tokens: stemmed, no
stopwords), a word weighing more the fewer units of the message hold it; the excerpt is the run of consecutive
units of at most ``limit`` characters with the highest total, the earliest of equal runs. A message none of
whose units holds a query word gives its opening (where a message usually states its point).

Spans are offsets into the message's content as stored (Python string indices: Unicode code points), end
exclusive, without the whitespace at either edge.

A context shows an excerpt as it shows a whole message: with its lines (``memory.text.shown_lines``).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from memory.models import Episode, Message
from memory.text import context_line, line_start, shown_lines
from retrieval.bm25 import tokenize

_UNIT_END = re.compile(r"\n|(?<=[.!?;:])\s+")
MARK = "…"


@dataclass(frozen=True)
class Units:
    """A message's units: their spans in the content, and for each word the units that hold it."""

    spans: tuple[tuple[int, int], ...]
    postings: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, spans: list[tuple[int, int]], words: list[list[str]]) -> Units:
        postings: dict[str, list[int]] = {}
        for index, unit in enumerate(words):
            for word in set(unit):
                postings.setdefault(word, []).append(index)
        return cls(tuple(spans), {word: tuple(units) for word, units in postings.items()})


def _cut(content: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """[start, end) in spans of at most ``limit`` characters, cut at the last whitespace before the limit
    (mid-word only where a run holds none), each without edge whitespace."""
    spans = []
    while start < end:
        while start < end and content[start].isspace():
            start += 1
        if start >= end:
            break
        stop = min(end, start + limit)
        if stop < end:
            space = max(content.rfind(" ", start + 1, stop), content.rfind("\n", start + 1, stop))
            stop = space if space > start else stop
        last = stop
        while last > start and content[last - 1].isspace():
            last -= 1
        spans.append((start, last))
        start = stop
    return spans


def unit_spans(content: str, limit: int) -> list[tuple[int, int]]:
    """The content's units, in order, none longer than ``limit`` characters."""
    spans: list[tuple[int, int]] = []
    start = 0
    for found in _UNIT_END.finditer(content):
        spans += _cut(content, start, found.start(), limit)
        start = found.end()
    spans += _cut(content, start, len(content), limit)
    return spans


# The units of the messages cut most recently, up to this many characters of their text in all: the same long
# messages recur from one request to the next, and a cut costs about a millisecond per 2,000 characters.
UNITS_CACHE_CHARS = 4_000_000
_units_cache: OrderedDict[tuple[str, int], Units] = OrderedDict()
_units_cache_chars = 0
_units_lock = threading.Lock()


def units(content: str, limit: int) -> Units:
    """The units of a message, its spans cut at ``limit`` characters at most."""
    global _units_cache_chars
    key = (content, limit)
    with _units_lock:
        found = _units_cache.get(key)
        if found is not None:
            _units_cache.move_to_end(key)
            return found
    spans = unit_spans(content, limit) or [(0, len(content))]
    found = Units.of(spans, tokenize([content[a:b] for a, b in spans]))
    with _units_lock:
        if key not in _units_cache and len(content) <= UNITS_CACHE_CHARS:
            _units_cache[key] = found
            _units_cache_chars += len(content)
            while _units_cache_chars > UNITS_CACHE_CHARS:
                (old, _limit), _units = _units_cache.popitem(last=False)
                _units_cache_chars -= len(old)
    return found


def query_words(text: str) -> frozenset[str]:
    return frozenset(tokenize([text])[0]) if text.strip() else frozenset()


def excerpt_span(content: str, wanted: frozenset[str], limit: int) -> tuple[int, int]:
    """The span of ``content`` (at most ``limit`` characters) that holds the most of the ``wanted`` words."""
    found = units(content, limit)
    scores = _unit_scores(found, wanted)
    spans = found.spans
    best, best_at, total, first = -1.0, (0, 0), 0.0, 0
    for last, (_start, end) in enumerate(spans):
        total += scores[last]
        while end - spans[first][0] > limit:
            total -= scores[first]
            first += 1
        if total > best + 1e-12:
            best, best_at = total, (first, last)
    if best <= 0:  # no unit holds a query word: the opening
        first, last = 0, 0
        while last + 1 < len(spans) and spans[last + 1][1] - spans[0][0] <= limit:
            last += 1
        best_at = (first, last)
    return spans[best_at[0]][0], spans[best_at[1]][1]


def _unit_scores(found: Units, wanted: frozenset[str]) -> list[float]:
    """Per unit, the weights of the wanted words it holds: log(1 + units / units holding the word)."""
    scores = [0.0] * len(found.spans)
    for word in sorted(wanted):  # one order, so that equal sums are equal to the last bit
        holding = found.postings.get(word)
        if holding:
            weight = math.log(1 + len(found.spans) / len(holding))
            for index in holding:
                scores[index] += weight
    return scores


def excerpt_text(content: str, span: tuple[int, int]) -> str:
    """The span's text as a context shows it (``shown_lines``), with ``…`` where the message goes on before or
    after it."""
    start, end = span
    opening = line_start(content, start)
    # A span that opens a line is shown with that line's indentation, against which the others are measured.
    text = shown_lines(content[opening if not content[opening:start].strip() else start : end])
    before = MARK + " " if content[:start].strip() else ""
    after = " " + MARK if content[end:].strip() else ""
    return f"{before}{text}{after}"


class MessageLines:
    """Each message's line in one context: ``context_line``, or for a message longer than the excerpt limit its
    excerpt for the query, "speaker (excerpt): … text …" (chosen once per message and request); a line holds the
    message's further lines, indented (``shown_lines``)."""

    def __init__(self, match_text: str, limit_chars: int | None) -> None:
        self._match_text = match_text
        self.limit_chars = limit_chars
        self._chosen: dict[tuple[str, int], tuple[str, tuple[int, int] | None]] = {}

    @functools.cached_property
    def _wanted(self) -> frozenset[str]:
        return query_words(self._match_text)

    def of(self, episode: Episode, index: int, message: Message) -> tuple[str, tuple[int, int] | None]:
        """(the line, the excerpt's span in the content or None for the whole message)."""
        key = (episode.uuid, index)
        found = self._chosen.get(key)
        if found is None:
            if self.limit_chars is not None and len(message.content) > self.limit_chars:
                span = excerpt_span(message.content, self._wanted, self.limit_chars)
                found = (f"{message.speaker} (excerpt): {excerpt_text(message.content, span)}", span)
            else:
                found = (context_line(message), None)
            self._chosen[key] = found
        return found
