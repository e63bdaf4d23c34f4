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
from typing import Any, Protocol

import numpy as np

from memory.models import Episode, Message
from memory.readmodel.reader import unit
from memory.timeutil import to_epoch, utc_now
from memory.tracing import group_hash, traced
from retrieval.analysis import Request
from retrieval.candidates import Candidate, episode_standing
from retrieval.keyword import KEYWORDS, keyword_index
from retrieval.message_rows import GROUP_ROWS, MessageRows, episode_rows, group_rows
from retrieval.policy import ScoringPolicy
from retrieval.speaker_names import LEARNED_NAMES, SPEAKER_NAMES
from retrieval.timewindow import TimeMention, TimeWindow

# What the read path derives from a group (memory.readmodel.reader.Derivation), registered with the read model
# by search and context (patched with the group, kept on disk with it).
DERIVED = (KEYWORDS, LEARNED_NAMES, SPEAKER_NAMES, GROUP_ROWS)


class QueryEmbedder(Protocol):
    """What scoring asks of the embedder (memory.embedding.embedder.ServiceEmbedder has it)."""

    def embed_query(self, text: str) -> np.ndarray: ...


@dataclass
class ScoredEpisode:
    episode: Episode
    messages: list[Message]  # the episode's source messages, in event-time order
    scores: list[float]  # one per message; -inf outside the query's sessions or time window


def recency_factor(timestamp: datetime, now: datetime, weight: float, half_life_days: float) -> float:
    """1 without weighting; otherwise (1 - weight) + weight * 0.5 ** (age / half-life)."""
    if weight <= 0:
        return 1.0
    return float(_decay(max(0.0, (now - timestamp).total_seconds() / 86400), weight, half_life_days))


def _decay(age_days: Any, weight: float, half_life_days: float) -> Any:
    """(1 - weight) + weight * 0.5 ** (age / half-life), for one age or an array of them."""
    return (1.0 - weight) + weight * np.power(0.5, np.divide(age_days, half_life_days))


def _scoring_attributes(request: Request, _candidates: Any, policy: ScoringPolicy, *_: Any, **_options: Any) -> dict:
    return {"group_hash": group_hash(request.group.group_id), "select": policy.select}


@traced("epimem.score.messages", _scoring_attributes, lambda scored: {"episodes": len(scored)})
def score_messages(
    request: Request,
    candidates: list[Candidate],
    policy: ScoringPolicy,
    embedder: QueryEmbedder,
    *,
    recency: bool = True,
) -> list[ScoredEpisode]:
    """The messages of at most ``policy.max_episodes`` episodes (not summaries) with their scores; without
    ``recency``, the query's recency weight left out (search weighs its episodes instead)."""
    group = request.group
    rows = group_rows(group) if policy.select == "group" else None
    whole_group = rows is not None
    if rows is None:
        standing = episode_standing(candidates)
        leading = sorted(standing, key=lambda e: (-standing[e], e))[: policy.max_episodes]
        rows = episode_rows(group, leading)
    if not len(rows):
        return []
    match_text = request.analysis.match_text
    index = keyword_index(group)
    keyword = index.scores(match_text)
    vector = unit(embedder.embed_query(match_text))
    scores = scored_rows(rows, vector, keyword, request, policy, recency=recency)
    chosen = _leading(rows, scores, policy.max_episodes if whole_group else None)
    starts = np.searchsorted(rows.owner, np.arange(len(rows.episodes) + 1))
    scored = []
    for number in chosen:
        span = range(starts[number], starts[number + 1])
        messages = [rows.messages[i] for i in span]
        scored.append(ScoredEpisode(rows.episodes[number], messages, scores[span].tolist()))
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
    request: Request,
    policy: ScoringPolicy,
    *,
    recency: bool = True,
) -> np.ndarray:
    """One score per row, -inf outside the query's sessions and time window. BM25 is divided by the query's
    best BM25 score."""
    query, analysis = request.query, request.analysis
    top = float(keyword.max()) if len(keyword) and keyword.max() > 0 else 1.0
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
        # An open episode (memory.readmodel.open_episodes) has no vector of its own: its messages' centroid is
        # its direction.
        episode_cosine = np.where((rows.episode_vectors < 0) & (norms > 0), centroid, episode_cosine)
    own = message_cosine + policy.keyword_weight * lexical(rows.message_keywords)
    topic = episode_cosine + policy.keyword_weight * lexical(rows.episode_keywords)
    neighbour = np.full(len(rows), -np.inf)
    for side in (rows.previous, rows.following):
        neighbour = np.where(side >= 0, np.maximum(neighbour, own[np.maximum(side, 0)]), neighbour)
    neighbour = np.where(np.isfinite(neighbour), neighbour, 0.0)
    scores = own + policy.episode_share * topic[rows.owner] + policy.neighbour_share * neighbour
    if analysis.named:
        scores = scores + policy.speaker_bonus * _speaker_prior(rows, scores, request, policy)
    if analysis.mentions:
        scores += policy.time_bonus * _covered(rows, analysis.mentions)
    scores -= policy.question_penalty * rows.asks
    if recency and query.recency_weight > 0:
        age_days = np.maximum(0.0, (to_epoch(query.reference_time or utc_now()) - rows.times) / 86400)
        decay = _decay(age_days, query.recency_weight, query.recency_half_life_days)
        scores = scores * decay
    return np.where(_in_scope(rows, request), scores, -np.inf)


def _speaker_prior(rows: MessageRows, scores: np.ndarray, request: Request, policy: ScoringPolicy) -> np.ndarray:
    """1 for the named speakers' messages and (``speaker_cap``) for those that outscore every named speaker's
    message by more than ``speaker_cap_margin``; 0 for the rest."""
    mine = np.isin(rows.speakers, list(request.analysis.named))
    prior = np.where(mine, 1.0, 0.0)
    if policy.speaker_cap:
        ranked = np.where(_in_scope(rows, request), scores, -np.inf)
        best_named = float(ranked[mine].max()) if mine.any() else -np.inf
        prior[np.isfinite(ranked) & (ranked > best_named + policy.speaker_cap_margin)] = 1.0
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


def _in_scope(rows: MessageRows, request: Request) -> np.ndarray:
    keep = _inside(rows.times, request.analysis.window)
    if request.query.session_ids is not None:
        keep &= np.isin(rows.sessions, list(request.query.session_ids))
    return keep


def _inside(times: np.ndarray, window: TimeWindow) -> np.ndarray:
    """TimeWindow.contains over epoch seconds: start <= t < end, an open side open."""
    keep = np.ones(len(times), dtype=bool)
    if window.start is not None:
        keep &= times >= to_epoch(window.start)
    if window.end is not None:
        keep &= times < to_epoch(window.end)
    return keep
