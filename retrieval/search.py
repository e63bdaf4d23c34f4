"""Hybrid search: vector similarity and BM25 over episodes and their messages, fused by rank.

Messages are indexed beside the episodes they belong to; a message hit counts for its episode,
so a question that matches one exact turn finds the episode that tells its story.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import bm25s
import numpy as np

from memory.embedding import Embedder
from memory.models import Episode, Message
from memory.store import ChromaStore, VectorRecord, episode_from_record, where_all
from memory.timeutil import from_epoch, to_epoch, utc_now
from retrieval.timewindow import TimeWindow, parse_time_window
from retrieval.types import Order, Scope, ScoreComponents, SearchHit, SearchQuery

RRF_K = 60
EPISODE_KINDS = ("episode", "summary")


@dataclass(frozen=True)
class Candidate:
    """One record's standing in the two rankings."""

    record_id: str
    episode_id: str
    metadata: dict[str, Any]
    vector: float = 0.0
    keyword: float = 0.0
    fused: float = 0.0


def resolve_window(scope: Scope) -> TimeWindow:
    """Intersect the absolute window with the natural-language one."""
    start, end = scope.start, scope.end
    if scope.time:
        window = parse_time_window(scope.time, reference=scope.reference_time, timezone=scope.timezone)
        if window.start is not None:
            start = max(start, window.start) if start else window.start
        if window.end is not None:
            end = min(end, window.end) if end else window.end
    return TimeWindow(start=start, end=end)


def scope_filter(scope: Scope, window: TimeWindow, *, kinds: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    clauses: list[dict[str, Any]] = []
    if kinds:
        clauses.append({"kind": {"$in": list(kinds)}})
    if scope.session_ids is not None and len(scope.session_ids) != 1:
        clauses.append({"session_id": {"$in": list(scope.session_ids)}})
    if window.start is not None:
        clauses.append({"ts": {"$gte": to_epoch(window.start)}})
    if window.end is not None:
        clauses.append({"ts": {"$lt": to_epoch(window.end)}})
    return where_all(clauses)


class KeywordIndex:
    """BM25 over every record of a group, rebuilt when the group's record count changes."""

    def __init__(self, records: list[VectorRecord]) -> None:
        self.records = records
        self._bm25 = bm25s.BM25()
        if records:
            corpus = [_keyword_text(record) for record in records]
            self._bm25.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if not tokens or not self.records:
            return np.zeros(len(self.records), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)


def _keyword_text(record: VectorRecord) -> str:
    title = record.metadata.get("title", "")
    speaker = record.metadata.get("producer_id", "")
    return f"{title} {speaker} {record.document}"


class Searcher:
    def __init__(self, *, store: ChromaStore, embedder: Embedder, keyword_cache_groups: int = 32) -> None:
        self._store = store
        self._embedder = embedder
        self._keyword: OrderedDict[str, tuple[int, KeywordIndex]] = OrderedDict()
        self._keyword_cache_groups = keyword_cache_groups
        self._lock = threading.Lock()

    # -- candidates ------------------------------------------------------------------------------

    def keyword_index(self, group_id: str) -> KeywordIndex:
        version = self._store.count_vectors(group_id)
        with self._lock:
            cached = self._keyword.get(group_id)
            if cached is not None and cached[0] == version:
                self._keyword.move_to_end(group_id)
                return cached[1]
        index = KeywordIndex(self._store.get_vectors(group_id))
        with self._lock:
            self._keyword[group_id] = (version, index)
            while len(self._keyword) > self._keyword_cache_groups:
                self._keyword.popitem(last=False)
        return index

    def forget_group(self, group_id: str) -> None:
        with self._lock:
            self._keyword.pop(group_id, None)

    def candidates(self, group_id: str, query: str, scope: Scope, *, depth: int) -> list[Candidate]:
        """Records (episodes and messages) ranked by reciprocal-rank fusion of vector and BM25."""
        window = resolve_window(scope)
        where = scope_filter(scope, window)
        single_session = scope.session_ids[0] if scope.session_ids and len(scope.session_ids) == 1 else None
        embedding = self._embedder.embed_query(query)  # type: ignore[attr-defined]
        hits = self._store.query(group_id, embedding, k=depth, session_id=single_session, where=where)
        vector_rank = {hit.id: rank for rank, hit in enumerate(hits)}
        metadata = {hit.id: hit.metadata for hit in hits}
        similarity = {hit.id: 1.0 - hit.distance for hit in hits}

        index = self.keyword_index(group_id)
        scores = index.scores(query)
        allowed = set(scope.session_ids) if scope.session_ids is not None else None
        keyword_ranked: list[tuple[float, int]] = []
        for position in np.argsort(-scores)[: depth * 4]:
            score = float(scores[position])
            if score <= 0:
                break
            record = index.records[int(position)]
            if allowed is not None and record.metadata.get("session_id") not in allowed:
                continue
            if not window.contains(from_epoch(float(record.metadata["ts"]))):
                continue
            keyword_ranked.append((score, int(position)))
            if len(keyword_ranked) >= depth:
                break
        keyword_rank: dict[str, int] = {}
        keyword_score: dict[str, float] = {}
        for rank, (score, position) in enumerate(keyword_ranked):
            record = index.records[position]
            keyword_rank[record.id] = rank
            keyword_score[record.id] = score
            metadata.setdefault(record.id, record.metadata)

        candidates = []
        for record_id, meta in metadata.items():
            fused = 0.0
            if record_id in vector_rank:
                fused += 1.0 / (RRF_K + vector_rank[record_id] + 1)
            if record_id in keyword_rank:
                fused += 1.0 / (RRF_K + keyword_rank[record_id] + 1)
            candidates.append(
                Candidate(
                    record_id=record_id,
                    episode_id=str(meta.get("episode_id", record_id)),
                    metadata=meta,
                    vector=similarity.get(record_id, 0.0),
                    keyword=keyword_score.get(record_id, 0.0),
                    fused=fused,
                )
            )
        candidates.sort(key=lambda candidate: -candidate.fused)
        return candidates

    # -- search ------------------------------------------------------------------------------------

    def search(self, group_id: str, query: SearchQuery) -> list[SearchHit]:
        depth = max(50, query.k * 8)
        candidates = self.candidates(group_id, query.query, query, depth=depth)
        by_episode: dict[str, list[Candidate]] = defaultdict(list)
        for candidate in candidates:
            by_episode[candidate.episode_id].append(candidate)
        episodes = self.load_episodes(group_id, list(by_episode))
        now = query.reference_time or utc_now()
        hits: list[SearchHit] = []
        seen_content: set[str] = set()
        for episode_id, items in by_episode.items():
            episode = episodes.get(episode_id)
            if episode is None:
                continue
            fingerprint = " ".join(episode.content.lower().split())
            if fingerprint in seen_content:  # near-duplicate: same text, other id
                continue
            seen_content.add(fingerprint)
            # An episode counts its best record fully and the rest of its matching messages a little.
            fused_scores = sorted((item.fused for item in items), reverse=True)
            fused = fused_scores[0] + 0.25 * sum(fused_scores[1:])
            recency = recency_factor(episode.timestamp, now, query.recency_weight, query.recency_half_life_days)
            hits.append(
                SearchHit(
                    episode=episode,
                    score=fused * recency,
                    components=ScoreComponents(
                        vector=max(item.vector for item in items),
                        keyword=max(item.keyword for item in items),
                        fused=fused,
                        recency=recency,
                    ),
                    matched_message_ids=[
                        str(item.metadata["message_id"]) for item in items if item.metadata.get("kind") == "message"
                    ],
                )
            )
        hits.sort(key=lambda hit: -hit.score)
        hits = hits[: query.k]
        if query.order is Order.CHRONOLOGICAL:
            hits.sort(key=lambda hit: (hit.episode.timestamp, hit.episode.uuid))
        if query.expand:
            hits = [hit.model_copy(update={"messages": self.source_messages(group_id, hit.episode)}) for hit in hits]
        return hits

    def load_episodes(self, group_id: str, episode_ids: list[str]) -> dict[str, Episode]:
        if not episode_ids:
            return {}
        records = self._store.get_vectors(group_id, ids=episode_ids)
        return {
            record.id: episode_from_record(record.document, record.metadata)
            for record in records
            if record.metadata.get("kind") in EPISODE_KINDS
        }

    def source_messages(self, group_id: str, episode: Episode) -> list[Message]:
        stored = self._store.get_messages(group_id, episode.session_id, list(episode.source_message_ids))
        messages = [stored[i].message for i in episode.source_message_ids if i in stored]
        return sorted(messages, key=lambda message: message.timestamp)


def recency_factor(timestamp: datetime, now: datetime, weight: float, half_life_days: float) -> float:
    if weight <= 0:
        return 1.0
    age_days = max(0.0, (now - timestamp).total_seconds() / 86400)
    return (1.0 - weight) + weight * math.pow(0.5, age_days / half_life_days)
