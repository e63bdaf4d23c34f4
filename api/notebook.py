"""Small helpers for exploring a memory in a notebook: every episode of a group, episodes as table
rows, and episode embeddings in two dimensions. (Where the benchmark data is, is not the package's
business: see ``tests/benchmarks/benchmark_data.py``.)

Plain Python and numpy only, so the package needs no pandas or matplotlib; notebooks build their
tables and plots from what these return (``pandas.DataFrame(episode_rows(episodes))``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from api.facade import Epimem
from memory.ingest.importers import LocomoSample
from memory.models import Episode
from memory.store.records import RecordFilter, RecordKind
from retrieval.types import MAX_TIMELINE_LIMIT


def first_sessions(sample: LocomoSample, count: int | None) -> LocomoSample:
    """The sample cut to its first ``count`` sessions (all when None), keeping only the questions
    whose evidence lies entirely in those sessions."""
    if count is None or count >= len(sample.sessions):
        return sample
    kept = dict(list(sample.sessions.items())[:count])
    message_ids = {message.id for messages in kept.values() for message in messages}
    questions = [q for q in sample.questions if q.evidence and set(q.evidence) <= message_ids]
    return LocomoSample(sample_id=sample.sample_id, speakers=sample.speakers, sessions=kept, questions=questions)


def all_episodes(service: Epimem, group_id: str, **scope: Any) -> list[Episode]:
    """Every episode of the group (within ``scope``, e.g. ``time="in May 2023"``) in time order, read page by page
    through the timeline: a session's pending messages as its open episode (``boundary_reason`` "open")."""
    episodes: list[Episode] = []
    cursor: str | None = None
    while True:
        page = service.timeline(group_id, limit=MAX_TIMELINE_LIMIT, cursor=cursor, **scope)
        episodes.extend(page.episodes)
        if page.next_cursor is None:
            return episodes
        cursor = page.next_cursor


def episode_rows(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """One flat dict per episode, ready for ``pandas.DataFrame``."""
    return [
        {
            "timestamp": episode.timestamp,
            "session_id": episode.session_id,
            "title": episode.title,
            "messages": episode.message_count,
            "first_message": episode.source_message_ids[0] if episode.source_message_ids else None,
            "last_message": episode.source_message_ids[-1] if episode.source_message_ids else None,
            "boundary": episode.boundary_reason.value,
            "generation": episode.generation.value,
            "uuid": episode.uuid,
        }
        for episode in episodes
    ]


@dataclass(frozen=True)
class EpisodeVectors:
    episodes: list[Episode]
    vectors: np.ndarray  # (len(episodes), dimension), rows in the order of ``episodes``


def episode_vectors(service: Epimem, group_id: str) -> EpisodeVectors:
    """The stored embedding of every episode of the group, in time order."""
    found: list[tuple[float, str, Episode, np.ndarray]] = []
    selection = RecordFilter(kinds=(RecordKind.EPISODE,))
    for record in service.memory.store.vectors.records(group_id, selection=selection, embeddings=True):
        if record.embedding is not None:
            found.append((record.timestamp, record.id, record.episode(), record.embedding))
    found.sort(key=lambda item: (item[0], item[1]))
    if not found:
        return EpisodeVectors(episodes=[], vectors=np.zeros((0, service.embedder.dimension), dtype=np.float32))
    vectors = np.stack([item[3] for item in found]).astype(np.float32)
    return EpisodeVectors(episodes=[item[2] for item in found], vectors=vectors)


def project_2d(vectors: np.ndarray) -> np.ndarray:
    """Principal-component projection of the rows onto their first two components (numpy SVD)."""
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError("expected a 2-d array of row vectors")
    centred = matrix - matrix.mean(axis=0, keepdims=True)
    if len(centred) < 2:
        return np.zeros((len(centred), 2))
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    projected = centred @ components[:2].T
    if projected.shape[1] < 2:  # a single feature: pad so callers can always plot x and y
        projected = np.pad(projected, ((0, 0), (0, 2 - projected.shape[1])))
    return projected


__all__ = [
    "EpisodeVectors",
    "all_episodes",
    "episode_rows",
    "episode_vectors",
    "first_sessions",
    "project_2d",
]
