"""The episode-generation seam and the offline generator that needs no LLM."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from memory.models import Episode, Segment
from memory.offline import generate_offline_episode

_EPISODE_NAMESPACE = uuid.UUID("6f1d8c1e-5b7a-4c1e-9a53-2f0d3e4b7a10")


def episode_id_for(group_id: str, session_id: str, message_ids: Sequence[str]) -> str:
    """Deterministic: the same messages in the same scope always give the same episode id,
    so a retried formation overwrites instead of duplicating."""
    key = "\x1f".join([group_id, session_id, *message_ids])
    return str(uuid.uuid5(_EPISODE_NAMESPACE, key))


class EpisodeGenerator(Protocol):
    """Turns one segment into one episode. Must always return a complete episode."""

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode: ...


class OfflineEpisodeGenerator:
    """Deterministic episodes from the messages themselves: no key, no network."""

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        return generate_offline_episode(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)
