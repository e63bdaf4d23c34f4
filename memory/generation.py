"""The episode-generation seam and the offline generator that needs no LLM."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from memory.models import Episode, Segment
from memory.offline import generate_offline_episode

_EPISODE_NAMESPACE = uuid.UUID("6f1d8c1e-5b7a-4c1e-9a53-2f0d3e4b7a10")


def episode_id_for(group_id: str, session_id: str, message_ids: Sequence[str]) -> str:
    """Deterministic: the same messages in the same scope always give the same episode id,
    so a retried formation overwrites instead of duplicating."""
    key = "\x1f".join([group_id, session_id, *message_ids])
    return str(uuid.uuid5(_EPISODE_NAMESPACE, key))


@dataclass
class GeneratorStats:
    """What a generator has done since start (exported as metrics)."""

    model: str
    episodes: int = 0
    calls: int = 0
    fallbacks: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0


class EpisodeGenerator(Protocol):
    """Turns one segment into one episode. Must always return a complete episode."""

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode: ...

    def stats(self) -> GeneratorStats: ...


class OfflineEpisodeGenerator:
    """Deterministic episodes from the messages themselves: no key, no network."""

    def __init__(self) -> None:
        self._stats = GeneratorStats(model="offline")

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        self._stats.episodes += 1
        return generate_offline_episode(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)

    def stats(self) -> GeneratorStats:
        return self._stats
