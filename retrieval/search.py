"""Hybrid search: vector similarity and BM25 over episodes and their messages, fused by rank.

Messages are indexed beside the episodes they belong to; a message hit counts for its episode,
so a question that matches one exact turn finds the episode that tells its story.

Group-wide search is one query on the group's index collection (the store keeps it beside the
per-session partitions), and one BM25 scoring over the group's kept keyword index: nothing on
the read path loops over sessions.

A search is a straight pipeline over one reader of the group (memory.readmodel): the query understood
(retrieval.analysis), candidates (retrieval.candidates), their episodes scored with the best evidence of
their messages (retrieval.scoring), ranked, near-duplicates dropped (retrieval.duplicates), expanded.

Hits are ranked by their raw score, (fused rank + 2.0 x best message evidence) x recency, which is unbounded
(below 0 to above 5) and means little outside its own response. A hit's ``score`` is the raw score on a fixed
0..1 scale (``scaled``: one rising logistic curve for every query, so the order is the same), fitted on LoCoMo
dev so that a score is about the chance that the hit holds the evidence of its question; ``min_score`` drops the
hits below a threshold (tests/benchmarks/score_scale.py measures the curve and the thresholds).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from memory.embedding.embedder import ServiceEmbedder
from memory.models import Episode
from memory.readmodel.model import ReadModel
from memory.store.records import is_open_episode_id
from memory.timeutil import utc_now
from memory.tracing import group_hash, traced
from retrieval.analysis import Request, understand
from retrieval.candidates import Candidate, candidates, episode_score
from retrieval.duplicates import drop_near_duplicates
from retrieval.filters import filter_match, shown
from retrieval.policy import ScoringPolicy
from retrieval.scoring import DERIVED, recency_factor, score_messages
from retrieval.types import Order, ScoreComponents, SearchHit, SearchQuery

# Search adds message evidence to the episodes it ranks: the messages of every candidate episode are
# the ones it scores (the same recall as scoring the whole group, at a cost bounded by the candidates;
# docs/benchmarks-recall.md). The evidence weight is chosen by leave-one-conversation-out.
SEARCH_POLICY = ScoringPolicy(select="episodes", max_episodes=100_000)

# The 0..1 scale of a hit's score: 1 / (1 + exp(-SCALE_SLOPE x (raw - SCALE_MIDPOINT))), fitted by logistic
# regression of "the hit holds evidence of its question" on the raw score (LoCoMo dev, 997 questions, k = 10:
# tests/benchmarks/score_scale.py prints the fit; docs/retrieval.md#scores has the figures).
SCALE_SLOPE = 2.29
SCALE_MIDPOINT = 4.06


def scaled(raw: float) -> float:
    """A raw search score on the fixed 0..1 scale: increasing, so hits keep their order."""
    exponent = -SCALE_SLOPE * (raw - SCALE_MIDPOINT)
    if exponent > 0:  # exp(-exponent) cannot overflow
        small = math.exp(-exponent)
        return small / (1.0 + small)
    return 1.0 / (1.0 + math.exp(exponent))


def _attributes(_searcher: Any, group_id: str, query: SearchQuery) -> dict[str, Any]:
    return {"group_hash": group_hash(group_id), "k": query.k}


class Searcher:
    """Hybrid search over a group, read through the read model (every request one reader of the group)."""

    def __init__(
        self, *, read_model: ReadModel, embedder: ServiceEmbedder, policy: ScoringPolicy = SEARCH_POLICY
    ) -> None:
        self.read_model = read_model
        self._embedder = embedder
        self.policy = policy
        read_model.register(*DERIVED)

    @traced("epimem.search", _attributes, lambda hits: {"hits": len(hits)})
    def search(self, group_id: str, query: SearchQuery) -> list[SearchHit]:
        # What this request reads (one version of the group, another server's writes included).
        request = understand(self.read_model.reader(group_id, fresh=True), query, self.policy)
        found = candidates(request, self._embedder, depth=max(50, query.k * 8))
        by_episode: dict[str, list[Candidate]] = defaultdict(list)
        for candidate in found:
            by_episode[candidate.episode_id].append(candidate)
        episodes = request.group.episodes(list(by_episode))
        vectors = request.group.vectors([e for e in episodes if not is_open_episode_id(e)])
        hits = self._ranked(query, by_episode, episodes, self._evidence(request, found))
        if query.dedupe:
            hits = drop_near_duplicates(hits, vectors, limit=query.k)
        hits = [hit for hit in hits[: query.k] if hit.score >= query.min_score]
        if query.order is Order.CHRONOLOGICAL:
            hits.sort(key=lambda hit: (hit.episode.timestamp, hit.episode.uuid))
        # A filter shows an episode as what passes (retrieval.filters.shown), expanded or not.
        return self._expanded(request, query, hits) if query.expand or query.filter is not None else hits

    def _evidence(self, request: Request, found: list[Candidate]) -> dict[str, float]:
        """Episode id -> the best message score of the episode (retrieval.scoring: the speakers and times the
        query names, the message's own match, its neighbours'); recency is applied per episode."""
        if self.policy.search_evidence <= 0:
            return {}
        scored = score_messages(request, found, self.policy, self._embedder, recency=False)
        return {item.episode.uuid: max(item.scores) for item in scored if item.scores}

    def _ranked(
        self,
        query: SearchQuery,
        by_episode: dict[str, list[Candidate]],
        episodes: dict[str, Episode],
        evidence: dict[str, float],
    ) -> list[SearchHit]:
        """Each candidate episode with its score: its candidates' fused rank plus its best evidence, times its
        recency."""
        now = query.reference_time or utc_now()
        hits: list[SearchHit] = []
        for episode_id, items in by_episode.items():
            episode = episodes.get(episode_id)
            if episode is None:
                continue
            fused = episode_score(items)
            sources = episode.source_episode_ids or (episode_id,)
            best = max((evidence[e] for e in sources if e in evidence), default=0.0)
            recency = recency_factor(episode.timestamp, now, query.recency_weight, query.recency_half_life_days)
            raw = (fused + self.policy.search_evidence * best) * recency
            hits.append(
                SearchHit(
                    episode=episode,
                    score=scaled(raw),
                    components=ScoreComponents(
                        vector=max(item.vector for item in items),
                        keyword=max(item.keyword for item in items),
                        fused=fused,
                        recency=recency,
                        evidence=best,
                        raw=raw,
                    ),
                    matched_message_ids=[item.record.message_id for item in items if item.is_message],
                    pending=is_open_episode_id(episode.uuid),
                )
            )
        hits.sort(key=lambda hit: (-hit.components.raw, hit.episode.uuid))
        return hits

    @staticmethod
    def _expanded(request: Request, query: SearchQuery, hits: list[SearchHit]) -> list[SearchHit]:
        """The hits as the request's filter shows them (``shown``), with their source messages that it lets
        pass when the query asks to expand them."""
        group = request.group
        match = filter_match(group, query.filter) if query.filter is not None else None
        expanded = []
        for hit in hits:
            found = group.source_messages(hit.episode)
            passing = [m for m in found if match is None or match.message(m, hit.episode)]
            update = {"episode": shown(hit.episode, found, passing), "messages": passing if query.expand else None}
            expanded.append(hit.model_copy(update=update))
        return expanded
