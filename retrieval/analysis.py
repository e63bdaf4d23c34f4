"""The query understood once per request: who it names, the text to match without those names, the
time window its scope asks for and the times the query mentions. Search and context both take this
one value, in a ``Request`` with the query and the group as the request reads it; nothing below them reads
the query's words again.

- **names**: a speaker is named by id or by another name of theirs ("What are Kate's hobbies?" names
  ``emi`` whom the others call Kate: retrieval.names);
- **match text**: the query without the names of the speakers it names (``strip_names``): a person's
  own messages rarely say their name, the speaker bonus finds them;
- **window**: the scope's absolute bounds intersected with the words of its ``time`` (retrieval.scope);
- **mentions**: times named inside the query ("... in June?", "... last week?", read against the
  reference time and timezone: retrieval.timewindow), which raise the messages from then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memory.readmodel.reader import GroupReader
from retrieval.names import named_in, without_names
from retrieval.policy import ScoringPolicy
from retrieval.scope import resolve_window
from retrieval.speaker_names import speaker_names
from retrieval.timewindow import TimeMention, TimeWindow, time_mentions
from retrieval.types import ContextQuery, SearchQuery

Query = ContextQuery | SearchQuery


@dataclass(frozen=True, kw_only=True)
class QueryAnalysis:
    text: str  # the query as ranked
    named: frozenset[str]  # the speakers (casefolded ids) it names
    match_text: str  # the text its words are matched with: ``text`` without the names of ``named``
    window: TimeWindow  # the scope's time window
    mentions: tuple[TimeMention, ...]  # the times the query mentions


def analyse(
    query: Query,
    *,
    speakers: Iterable[str],
    names: Mapping[str, set[str]],
    other_names: bool = True,
    strip_names: bool = True,
) -> QueryAnalysis:
    """``speakers``: the group's speakers (casefolded ids); ``names``: their other names (retrieval.names)."""
    text = query.query
    known = names if other_names else None
    named = named_in(text, speakers, known)
    return QueryAnalysis(
        text=text,
        named=frozenset(named),
        match_text=without_names(text, named, known or {}) if strip_names else text,
        window=resolve_window(query),
        mentions=tuple(time_mentions(text, reference=query.reference_time, timezone=query.timezone)),
    )


@dataclass(frozen=True)
class Request:
    """One read (a search or a context) as its stages take it: the group at the version this request reads,
    the query, and what the query means."""

    group: GroupReader
    query: Query
    analysis: QueryAnalysis


def understand(group: GroupReader, query: Query, policy: ScoringPolicy) -> Request:
    """The request for ``query``: the query analysed once against the group's speakers and their other names."""
    analysis = analyse(
        query,
        speakers=group.speakers(),
        names=speaker_names(group),
        other_names=policy.other_names,
        strip_names=policy.strip_names,
    )
    return Request(group, query, analysis)
