"""Candidates: the records (episodes and messages) of a request's group nearest to its query (the store's
vector query) and best by BM25 (the group's keyword index), fused by reciprocal rank and passed through the
request's filter; and an episode's standing from its candidates."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memory.store.records import VectorRecord
from memory.tracing import group_hash, traced
from retrieval.analysis import Request
from retrieval.filters import filter_match, passing_candidates
from retrieval.keyword import keyword_index
from retrieval.scope import scope_filter

RRF_K = 60
# An episode counts its best record fully and each further matching record by this share.
SUPPORT_WEIGHT = 0.25
# A filter drops candidates after ranking: this many times more are ranked so that enough pass.
FILTER_DEPTH = 4


class QueryEmbedder(Protocol):
    """What candidates ask of the embedder (memory.embedding.embedder.ServiceEmbedder has it)."""

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class Candidate:
    """One record's standing in the two rankings (ranks are 0-based; None = not in that list)."""

    record: VectorRecord
    vector: float = 0.0
    keyword: float = 0.0
    fused: float = 0.0
    vector_rank: int | None = None
    keyword_rank: int | None = None

    @property
    def record_id(self) -> str:
        return self.record.id

    @property
    def episode_id(self) -> str:
        return self.record.episode_id

    @property
    def is_message(self) -> bool:
        return self.record.is_message


def rrf(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / (RRF_K + rank + 1)


def episode_score(items: list[Candidate]) -> float:
    fused = sorted((item.fused for item in items), reverse=True)
    return fused[0] + SUPPORT_WEIGHT * sum(fused[1:])


def episode_standing(candidates: list[Candidate]) -> dict[str, float]:
    by_episode: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        by_episode[candidate.episode_id].append(candidate)
    return {episode_id: episode_score(items) for episode_id, items in by_episode.items()}


def _attributes(request: Request, _embedder: Any, *, depth: int) -> dict[str, Any]:
    return {"group_hash": group_hash(request.group.group_id), "depth": depth}


@traced("epimem.search.candidates", _attributes, lambda found: {"candidates": len(found)})
def candidates(request: Request, embedder: QueryEmbedder, *, depth: int) -> list[Candidate]:
    """The request's records (episodes and messages) ranked by reciprocal-rank fusion of vector and BM25,
    those its filter lets pass."""
    group, query, analysis = request.group, request.query, request.analysis
    columns = group.columns
    if query.filter is not None:
        depth *= FILTER_DEPTH
    text = analysis.text
    selection = scope_filter(query, analysis.window)
    # The message evidence scored next (search, context) embeds the text without the speakers'
    # names: both in one forward pass, the second left in the query cache (a second pass without it).
    texts = [text] if analysis.match_text == text else [text, analysis.match_text]
    hits = group.nearest(embedder.embed_queries(texts)[0], k=depth, selection=selection)
    vector_rank: dict[str, int] = {}
    records: dict[str, VectorRecord] = {}
    similarity: dict[str, float] = {}
    for rank, (record_id, distance) in enumerate(hits):
        record = columns.record_by_id(record_id)
        if record is None:  # written after this request's version: not part of what it sees
            continue
        vector_rank[record_id] = rank
        records[record_id] = record
        similarity[record_id] = 1.0 - distance

    keyword_rank: dict[str, int] = {}
    keyword_score: dict[str, float] = {}
    top = keyword_index(group).top(
        text, depth=depth, session_ids=query.session_ids, start=selection.since, end=selection.before
    )
    for rank, (record, score) in enumerate(top):
        keyword_rank[record.id] = rank
        keyword_score[record.id] = score
        records.setdefault(record.id, record)

    found = [
        Candidate(
            record=record,
            vector=similarity.get(record_id, 0.0),
            keyword=keyword_score.get(record_id, 0.0),
            fused=rrf(vector_rank.get(record_id)) + rrf(keyword_rank.get(record_id)),
            vector_rank=vector_rank.get(record_id),
            keyword_rank=keyword_rank.get(record_id),
        )
        for record_id, record in records.items()
    ]
    found.sort(key=lambda candidate: (-candidate.fused, candidate.record_id))
    if query.filter is not None:
        found = passing_candidates(group, filter_match(group, query.filter), found)
    return found
