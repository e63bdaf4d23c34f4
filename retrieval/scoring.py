"""Message-level evidence for a query, shared by the context builder and search.

Messages of the best episodes (by fused vector + BM25 rank of their records) get one score that
joins these signals:

- the message's own signal: exact cosine with the query + BM25 over the query's best BM25 score;
- its episode's signal (the same for the episode record, its cosine partly taken from the centroid
  of its messages' vectors: the episode's own vector sees only the start of a long episode), so the
  turns of a conversation stretch that is about the query come along;
- its best neighbour's signal, so the answer that follows a matching question is kept;
- a bonus when the query names the message's speaker, by id or by another name of theirs
  ("What are Kate's hobbies?" for the speaker ``emi`` whom the other person calls Kate:
  retrieval.names);
- a bonus when the query names a time the message falls in ("... on 3 June, 2023?", "... in June?",
  "... last week?", read against the query's reference time and timezone: retrieval.timewindow);
- a small penalty for a turn that only asks (ends with "?"): the answer after it tells more.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from memory.models import Episode, Message
from memory.store.records import EPISODE_KINDS, message_record_id
from memory.timeutil import utc_now
from retrieval.names import named_in
from retrieval.timewindow import TimeMention, time_mentions
from retrieval.types import ContextQuery, SearchQuery

Query = ContextQuery | SearchQuery

if TYPE_CHECKING:
    from retrieval.search import Candidate, Searcher

_ASKS_WHEN = re.compile(r"^\s*(?:when|what (?:date|day|time|year|month))\b|\bhow long ago\b", re.IGNORECASE)
_MONTH = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_TIME_WORDS = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|this (?:week|weekend|month|year|morning|evening)"
    rf"|weekend|(?:mon|tues|wednes|thurs|fri|satur|sun)day|{_MONTH}|(?:19|20)\d\d|\d{{1,2}}(?::\d\d)?\s*[ap]m)\b",
    re.IGNORECASE,
)
# An episode counts its best record fully and each further matching record by this share.
SUPPORT_WEIGHT = 0.25


@dataclass(frozen=True, kw_only=True)
class ScoringPolicy:
    """Weights of the message score; the defaults are chosen by leave-one-conversation-out on
    LoCoMo dev and REALTALK dev (docs/benchmarks-recall.md)."""

    depth: int = 200  # records taken from each ranking (vector and BM25)
    max_episodes: int = 40  # episodes whose messages are scored
    keyword_weight: float = 0.5  # BM25 (divided by the query's best BM25 score) added to the cosine
    episode_share: float = 0.8  # weight of the episode's own signal in each of its messages' score
    neighbour_share: float = 0.4  # weight of the best adjacent message's own signal
    speaker_bonus: float = 0.4  # added to the messages of a speaker the query names (by id or other name)
    time_bonus: float = 0.5  # added to the messages from a time the query names
    question_penalty: float = 0.1  # taken from a turn that ends with a question mark
    episode_centroid: float = 0.5  # share of an episode's cosine taken from its messages' centroid
    search_evidence: float = 1.0  # search: weight of an episode's best message score beside its fused rank
    run_share: float = 0.0  # weight of the best signal among the other messages of a one-speaker run
    neighbour_gap_hours: float = 0.0  # a neighbour further apart in time does not count (0: no limit)
    when_bonus: float = 0.0  # "When ...?": added to messages that carry a time expression
    spread: float = 0.0  # taken from the n-th best message of an episode, times n (breadth)
    names_to_ids: bool = False  # read a speaker's other names in the query as its id
    other_names: bool = True  # the speaker bonus also for a speaker's other names (retrieval.names)


@dataclass
class ScoredEpisode:
    episode: Episode
    messages: list[Message]  # all source messages of the episode, in event-time order
    scores: list[float]  # one per message


def episode_score(items: list[Candidate]) -> float:
    fused = sorted((item.fused for item in items), reverse=True)
    return fused[0] + SUPPORT_WEIGHT * sum(fused[1:])


def recency_factor(timestamp: datetime, now: datetime, weight: float, half_life_days: float) -> float:
    """1 without weighting; otherwise (1 - weight) + weight * 0.5 ** (age / half-life)."""
    if weight <= 0:
        return 1.0
    age_days = max(0.0, (now - timestamp).total_seconds() / 86400)
    return (1.0 - weight) + weight * math.pow(0.5, age_days / half_life_days)


def episode_standing(candidates: list[Candidate]) -> dict[str, float]:
    by_episode: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        by_episode[candidate.episode_id].append(candidate)
    return {episode_id: episode_score(items) for episode_id, items in by_episode.items()}


def score_messages(
    searcher: Searcher,
    group_id: str,
    candidates: list[Candidate],
    query: Query,
    policy: ScoringPolicy,
) -> list[ScoredEpisode]:
    """Every message of the best ``policy.max_episodes`` episodes (not summaries) with its score."""
    standing = episode_standing(candidates)
    best = sorted(standing, key=lambda e: (-standing[e], e))[: policy.max_episodes]
    episodes = [
        e
        for e in searcher.load_episodes(group_id, best).values()
        if e.episode_type.value in EPISODE_KINDS and not e.source_episode_ids
    ]
    messages = searcher.messages_of(group_id, episodes)
    # Exact signals for every message of those episodes, whether or not it made a candidate list.
    cosine = searcher.similarities(group_id, query.query, episodes, episode_centroid=policy.episode_centroid)
    index, keyword = searcher.keyword_scores(group_id, query.query)
    top_keyword = float(keyword.max()) if len(keyword) and keyword.max() > 0 else 1.0

    def signal(record_id: str) -> float:
        position = index.positions.get(record_id)
        lexical = float(keyword[position]) / top_keyword if position is not None else 0.0
        return cosine.get(record_id, 0.0) + policy.keyword_weight * lexical

    speakers = {m.speaker for items in messages.values() for m in items}
    signals = _QuerySignals(
        named=named_in(query.query, speakers, searcher.speaker_names(group_id) if policy.other_names else None),
        times=time_mentions(query.query, reference=query.reference_time, timezone=query.timezone),
        asks_when=bool(_ASKS_WHEN.search(query.query)),
    )
    scored: list[ScoredEpisode] = []
    for episode in episodes:
        items = messages.get(episode.uuid, [])
        if items:
            own = [signal(message_record_id(episode.session_id, m.id)) for m in items]
            scores = _message_scores(items, own, signal(episode.uuid), signals, query, policy)
            scored.append(ScoredEpisode(episode, items, scores))
    return scored


@dataclass(frozen=True)
class _QuerySignals:
    named: set[str]  # speakers the query names
    times: list[TimeMention]  # times the query names
    asks_when: bool  # "When did ...?"


def _message_scores(
    items: list[Message], own: list[float], topic: float, signals: _QuerySignals, query: Query, policy: ScoringPolicy
) -> list[float]:
    now = query.reference_time or utc_now()
    runs = _speaker_runs(items, own) if policy.run_share else [0.0] * len(items)
    gap = policy.neighbour_gap_hours * 3600
    scores = []
    for position, message in enumerate(items):
        neighbours = [
            own[j]
            for j in (position - 1, position + 1)
            if 0 <= j < len(items) and (not gap or abs((items[j].timestamp - message.timestamp).total_seconds()) <= gap)
        ]
        score = own[position] + policy.episode_share * topic + policy.neighbour_share * max(neighbours, default=0.0)
        score += policy.run_share * runs[position]
        if message.speaker.casefold() in signals.named:
            score += policy.speaker_bonus
        if any(mention.covers(message.timestamp) for mention in signals.times):
            score += policy.time_bonus
        if signals.asks_when and _TIME_WORDS.search(message.content):
            score += policy.when_bonus
        if message.content.rstrip().endswith("?"):
            score -= policy.question_penalty
        if query.recency_weight > 0:
            score *= recency_factor(message.timestamp, now, query.recency_weight, query.recency_half_life_days)
        scores.append(score)
    if policy.spread:  # breadth: each further message of one episode counts a little less
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        for rank, position in enumerate(order):
            scores[position] -= policy.spread * rank
    return scores


def _speaker_runs(items: list[Message], own: list[float]) -> list[float]:
    """For each message, the best own signal of the other messages of its run (consecutive messages
    of one speaker: one thought split over several messages)."""
    found = [0.0] * len(items)
    start = 0
    for end in range(1, len(items) + 1):
        if end == len(items) or items[end].speaker != items[start].speaker:
            for position in range(start, end):
                others = [own[j] for j in range(start, end) if j != position]
                found[position] = max(others, default=0.0)
            start = end
    return found
