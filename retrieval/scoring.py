"""Message-level evidence for a query, shared by the context builder and search.

Messages get one score that joins these signals:

- the message's own signal: exact cosine with the query + BM25 over the query's best BM25 score;
- its episode's signal (the same for the episode record, its cosine partly taken from the centroid
  of its messages' vectors: the episode's own vector sees only the start of a long episode), so the
  turns of a conversation stretch that is about the query come along;
- its best neighbour's signal, so the answer that follows a matching question is kept;
- a bonus when the query names the message's speaker, by id or by another name of theirs
  ("What are Kate's hobbies?" for the speaker ``emi`` whom the other person calls Kate:
  retrieval.names); the names of the speakers it names are left out of the text that is matched
  (``strip_names``): a person's own messages rarely say their name, the bonus finds them;
- a bonus when the query names a time the message falls in ("... on 3 June, 2023?", "... in June?",
  "... last week?", read against the query's reference time and timezone: retrieval.timewindow);
- a small penalty for a turn that only asks (ends with "?"): the answer after it tells more.

Which messages are scored (``select``): "group", every message of the group, and the
``max_episodes`` episodes holding the best-scored messages are returned (evidence outside the
best-ranked episodes can be found; this needs the group's full read snapshot, and a group too large
for it is scored as with "episodes"); "episodes", the messages of the ``max_episodes`` best episodes
by the fused vector + BM25 rank of their records (the behaviour before). Messages outside the query's
sessions or time window are never scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import numpy as np

from memory.models import Episode, Message
from memory.timeutil import to_epoch, utc_now
from memory.tracing import group_hash, traced
from retrieval.analysis import Query, QueryAnalysis
from retrieval.candidates import Candidate, Loaded, episode_standing
from retrieval.keyword import KeywordIndex
from retrieval.message_rows import MessageRows
from retrieval.timewindow import TimeMention, TimeWindow


@dataclass(frozen=True, kw_only=True)
class ScoringPolicy:
    """Weights of the message score; the defaults are chosen by leave-one-conversation-out on
    LoCoMo dev and REALTALK dev (docs/benchmarks-recall.md)."""

    depth: int = 200  # records taken from each ranking (vector and BM25)
    max_episodes: int = 40  # episodes whose messages are returned
    select: Literal["group", "episodes"] = "group"  # score every message, or those of the best-ranked episodes
    keyword_weight: float = 0.3  # BM25 (divided by the query's best BM25 score) added to the cosine
    # ... divided by at least this x the query's full-match scale (its tokens' idf summed; 0: the best score only):
    # when only the query's common words are found, the best of those matches is not worth a full keyword match
    keyword_ideal: float = 0.0
    episode_share: float = 0.8  # weight of the episode's own signal in each of its messages' score
    neighbour_share: float = 0.2  # weight of the best adjacent message's own signal
    speaker_bonus: float = 0.6  # added to the messages of a speaker the query names (by id or other name)
    time_bonus: float = 0.5  # added to the messages from a time the query names
    question_penalty: float = 0.1  # taken from a turn that ends with a question mark
    episode_centroid: float = 0.5  # share of an episode's cosine taken from its messages' centroid
    search_evidence: float = 2.0  # search: weight of an episode's best message score beside its fused rank
    when_bonus: float = 0.0  # "When ...?": added to messages that carry a time expression
    strip_names: bool = True  # the names of the speakers the query names are left out of the matched text
    first_person: bool = False  # ... and one named speaker's name read as "I" / "my" (what their messages say)
    names_to_ids: bool = False  # read a speaker's other names in the query as its id
    other_names: bool = True  # the speaker bonus also for a speaker's other names (retrieval.names)
    # The speaker bonus also for the best ``speaker_admit`` messages by their score before it, whoever said
    # them: a question naming the wrong person ("What did Caroline realise after her charity race?" when
    # Melanie ran it) still finds where it was really said.
    speaker_admit: int = 0
    other_speaker_share: float = 0.0  # share of the speaker bonus the speakers the query does not name get
    speaker_cap: bool = False  # the bonus also for a message that outscores every message of the named speakers
    speaker_cap_margin: float = 0.0  # ... by more than this (with ``speaker_cap``)
    # When another speaker's best message outscores every message of the named speakers by more than this
    # (before the bonus), the question is read as naming the wrong person and the bonus goes to every
    # message (None: never).
    speaker_gate: float | None = None


class RowSource(Protocol):
    """What scoring reads of a group (retrieval.search.Searcher)."""

    def group_rows(self, group_id: str, *, fresh: bool = False) -> MessageRows | None: ...

    def episode_rows(self, group_id: str, episode_ids: list[str], loaded: Loaded | None = None) -> MessageRows: ...

    def keyword_scores(self, group_id: str, query: str) -> tuple[KeywordIndex, np.ndarray]: ...

    def embed_query(self, query: str) -> np.ndarray: ...


@dataclass
class ScoredEpisode:
    episode: Episode
    messages: list[Message]  # the episode's source messages, in event-time order
    scores: list[float]  # one per message; -inf outside the query's sessions or time window
    plain: list[float]  # the same scores without what the speaker prior added
    vectors: np.ndarray | None = None  # (with ``vectors``) one unit vector per message (zeros: none)


def recency_factor(timestamp: datetime, now: datetime, weight: float, half_life_days: float) -> float:
    """1 without weighting; otherwise (1 - weight) + weight * 0.5 ** (age / half-life)."""
    if weight <= 0:
        return 1.0
    return float(_decay(max(0.0, (now - timestamp).total_seconds() / 86400), weight, half_life_days))


def _decay(age_days: Any, weight: float, half_life_days: float) -> Any:
    """(1 - weight) + weight * 0.5 ** (age / half-life), for one age or an array of them."""
    return (1.0 - weight) + weight * np.power(0.5, np.divide(age_days, half_life_days))


def _scoring_attributes(
    _source: Any,
    group_id: str,
    _candidates: Any,
    _query: Any,
    _analysis: Any,
    policy: ScoringPolicy,
    *_: Any,
    **_options: Any,
) -> dict:
    return {"group_hash": group_hash(group_id), "select": policy.select}


@traced("epimem.score.messages", _scoring_attributes, lambda scored: {"episodes": len(scored)})
def score_messages(
    source: RowSource,
    group_id: str,
    candidates: list[Candidate],
    query: Query,
    analysis: QueryAnalysis,
    policy: ScoringPolicy,
    loaded: Loaded | None = None,
    *,
    plain_episodes: bool = False,
    vectors: bool = False,
) -> list[ScoredEpisode]:
    """The messages of at most ``policy.max_episodes`` episodes (not summaries) with their scores
    (``loaded``: episodes and vectors the caller already read); with ``plain_episodes``, also (after them)
    the ``policy.max_episodes`` episodes that hold the best scores without the speaker prior; with ``vectors``,
    each message's unit vector."""
    rows = source.group_rows(group_id) if policy.select == "group" else None
    whole_group = rows is not None
    if rows is None:
        standing = episode_standing(candidates)
        leading = sorted(standing, key=lambda e: (-standing[e], e))[: policy.max_episodes]
        rows = source.episode_rows(group_id, leading, loaded)
    if not len(rows):
        return []
    index, keyword = source.keyword_scores(group_id, analysis.match_text)
    vector = unit(source.embed_query(analysis.match_text))
    ideal = policy.keyword_ideal * index.ideal(analysis.match_text) if policy.keyword_ideal > 0 else 0.0
    scores, prior = scored_rows(rows, vector, keyword, query, analysis, policy, ideal=ideal)
    plain = scores - prior
    chosen = _leading(rows, scores, policy.max_episodes if whole_group else None)
    if plain_episodes:
        chosen += [e for e in _leading(rows, plain, policy.max_episodes if whole_group else None) if e not in chosen]
    starts = np.searchsorted(rows.owner, np.arange(len(rows.episodes) + 1))
    scored = []
    for number in chosen:
        span = range(starts[number], starts[number + 1])
        messages = [rows.messages[i] for i in span]
        found = ScoredEpisode(rows.episodes[number], messages, scores[span].tolist(), plain[span].tolist())
        if vectors:
            pointers = rows.message_vectors[starts[number] : starts[number + 1]]
            dimension = rows.matrix.shape[1] if rows.matrix.ndim == 2 else 0
            found.vectors = np.zeros((len(pointers), dimension), dtype=np.float32)
            if len(rows.matrix):
                found.vectors[pointers >= 0] = rows.matrix[pointers[pointers >= 0]]
        scored.append(found)
    return scored


def _leading(rows: MessageRows, scores: np.ndarray, limit: int | None) -> list[int]:
    """Episode numbers by their best message score, best first (those with a finite one; at most ``limit``)."""
    best = np.full(len(rows.episodes), -np.inf)
    np.maximum.at(best, rows.owner, scores)
    chosen = [int(e) for e in np.argsort(-best, kind="stable") if np.isfinite(best[e])]
    return chosen[:limit] if limit is not None else chosen


def scored_rows(
    rows: MessageRows,
    query_vector: np.ndarray,
    keyword: np.ndarray,
    query: Query,
    analysis: QueryAnalysis,
    policy: ScoringPolicy,
    *,
    ideal: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(one score per row, -inf outside the query's sessions and time window; the part of it the
    speaker prior added). BM25 is divided by the query's best BM25 score, or by ``ideal`` where greater."""
    top = float(keyword.max()) if len(keyword) and keyword.max() > 0 else 1.0
    top = max(top, ideal)
    cosine = _cosines(rows, query_vector)

    def lexical(positions: np.ndarray) -> np.ndarray:
        found = np.zeros(len(positions), dtype=np.float64)
        inside = positions >= 0
        found[inside] = keyword[positions[inside]] / top
        return found

    message_cosine = np.where(rows.message_vectors >= 0, cosine[np.maximum(rows.message_vectors, 0)], 0.0)
    episode_cosine = np.where(rows.episode_vectors >= 0, cosine[np.maximum(rows.episode_vectors, 0)], 0.0)
    if policy.episode_centroid > 0:
        sums = np.zeros(len(rows.episodes))
        np.add.at(sums, rows.owner, message_cosine)
        norms = rows.centroid_norms
        centroid = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
        blend = (rows.episode_vectors >= 0) & (norms > 0)
        share = policy.episode_centroid
        episode_cosine = np.where(blend, (1 - share) * episode_cosine + share * centroid, episode_cosine)
        # An open episode (retrieval.pending) has no vector of its own: its messages' centroid is its direction.
        episode_cosine = np.where((rows.episode_vectors < 0) & (norms > 0), centroid, episode_cosine)
    own = message_cosine + policy.keyword_weight * lexical(rows.message_keywords)
    topic = episode_cosine + policy.keyword_weight * lexical(rows.episode_keywords)
    neighbour = np.full(len(rows), -np.inf)
    for side in (rows.previous, rows.following):
        neighbour = np.where(side >= 0, np.maximum(neighbour, own[np.maximum(side, 0)]), neighbour)
    neighbour = np.where(np.isfinite(neighbour), neighbour, 0.0)
    scores = own + policy.episode_share * topic[rows.owner] + policy.neighbour_share * neighbour
    prior = np.zeros(len(rows))
    if analysis.named:
        prior = policy.speaker_bonus * _speaker_prior(rows, scores, query, analysis, policy)
        scores = scores + prior
    if analysis.mentions:
        scores += policy.time_bonus * _covered(rows, analysis.mentions)
    if policy.when_bonus and analysis.asks_when:
        scores += policy.when_bonus * rows.timed
    scores -= policy.question_penalty * rows.asks
    if query.recency_weight > 0:
        age_days = np.maximum(0.0, (to_epoch(query.reference_time or utc_now()) - rows.times) / 86400)
        decay = _decay(age_days, query.recency_weight, query.recency_half_life_days)
        scores, prior = scores * decay, prior * decay
    return np.where(_in_scope(rows, query, analysis.window), scores, -np.inf), prior


def _speaker_prior(
    rows: MessageRows, scores: np.ndarray, query: Query, analysis: QueryAnalysis, policy: ScoringPolicy
) -> np.ndarray:
    """1 for the named speakers' messages, for the ``speaker_admit`` best-scored messages in scope and
    (``speaker_cap``) for those that outscore every named speaker's message by more than ``speaker_cap_margin``;
    ``other_speaker_share`` for the rest. 1 for every message when another speaker's best outscores the named
    speakers' best by more than ``speaker_gate`` (the question read as naming the wrong person)."""
    mine = np.isin(rows.speakers, list(analysis.named))
    prior = np.where(mine, 1.0, policy.other_speaker_share)
    ranked = np.where(_in_scope(rows, query, analysis.window), scores, -np.inf)
    best_named = float(ranked[mine].max()) if mine.any() else -np.inf
    if policy.speaker_gate is not None and np.isfinite(best_named):
        others = ranked[~mine]
        if len(others) and float(others.max()) > best_named + policy.speaker_gate:
            return np.ones(len(rows))
    if policy.speaker_cap:
        prior[np.isfinite(ranked) & (ranked > best_named + policy.speaker_cap_margin)] = 1.0
    if policy.speaker_admit > 0:
        best = np.argsort(-ranked, kind="stable")[: policy.speaker_admit]
        prior[best[np.isfinite(ranked[best])]] = 1.0
    return prior


def _cosines(rows: MessageRows, query_vector: np.ndarray) -> np.ndarray:
    """Cosine of the query with each matrix row the rows point to (others: 0)."""
    needed = np.concatenate([rows.message_vectors, rows.episode_vectors])
    needed = np.unique(needed[needed >= 0])
    if len(needed) and 2 * len(needed) >= len(rows.matrix):
        return np.asarray(rows.matrix @ query_vector, dtype=np.float64)
    cosine = np.zeros(max(len(rows.matrix), 1), dtype=np.float64)
    cosine[needed] = rows.matrix[needed] @ query_vector
    return cosine


def _covered(rows: MessageRows, mentions: tuple[TimeMention, ...]) -> np.ndarray:
    hit = np.zeros(len(rows), dtype=bool)
    for mention in mentions:
        if mention.window is not None:
            hit |= _inside(rows.times, mention.window)
        else:
            hit |= np.asarray([mention.covers(m.timestamp) for m in rows.messages], dtype=bool)
    return hit


def _in_scope(rows: MessageRows, query: Query, window: TimeWindow) -> np.ndarray:
    keep = _inside(rows.times, window)
    if query.session_ids is not None:
        keep &= np.isin(rows.sessions, list(query.session_ids))
    return keep


def _inside(times: np.ndarray, window: TimeWindow) -> np.ndarray:
    """TimeWindow.contains over epoch seconds: start <= t < end, an open side open."""
    keep = np.ones(len(times), dtype=bool)
    if window.start is not None:
        keep &= times >= to_epoch(window.start)
    if window.end is not None:
        keep &= times < to_epoch(window.end)
    return keep


def unit(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32)
    return vector / (float(np.linalg.norm(vector)) or 1.0)
