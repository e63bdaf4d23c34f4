"""Candidates: the records (episodes and messages) the two rankings found, fused by reciprocal rank, and
an episode's standing from its candidates."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from memory.models import Episode
from memory.store.records import VectorRecord

RRF_K = 60
# An episode counts its best record fully and each further matching record by this share.
SUPPORT_WEIGHT = 0.25


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


@dataclass(frozen=True)
class Loaded:
    """What a request already read for its candidate episodes (by episode id)."""

    episodes: Mapping[str, Episode]
    vectors: Mapping[str, np.ndarray]


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
