"""The episode-generation seam: the protocol, the offline generator, validation and batch generation."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from pydantic import ValidationError

from memory.episodes.offline import generate_offline_episode
from memory.errors import EpimemError
from memory.llm.stats import LLMCallStats, Reporting
from memory.models import Episode, GenerationMethod, Segment
from memory.timeutil import utc_now

log = logging.getLogger("epimem.generation")

_EPISODE_NAMESPACE = uuid.UUID("6f1d8c1e-5b7a-4c1e-9a53-2f0d3e4b7a10")

# Clocks of message producers are not perfect: a timestamp this far in the future is still accepted.
CLOCK_SKEW = timedelta(minutes=5)


def episode_id_for(group_id: str, session_id: str, message_ids: Sequence[str]) -> str:
    """Deterministic: the same messages in the same scope always give the same episode id,
    so a retried formation overwrites instead of duplicating."""
    key = "\x1f".join([group_id, session_id, *message_ids])
    return str(uuid.uuid5(_EPISODE_NAMESPACE, key))


@dataclass
class GeneratorStats(LLMCallStats):
    """An episode generator's counters: one call per episode; ``fallbacks`` are episodes built
    offline because the LLM failed; ``repairs`` the LLM answers fixed up rather than rejected."""

    episodes: int = 0
    repairs: int = 0
    prompt_version: str | None = None


class EpisodeGenerator(Protocol):
    """Turns one segment into one episode. Must always return a complete episode."""

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode: ...


class ReportingGenerator(EpisodeGenerator, Reporting[GeneratorStats], Protocol):
    """A generator that also reports its counters: what the service is built with."""


class OfflineEpisodeGenerator:
    """Deterministic episodes from the messages themselves: no key, no network."""

    def __init__(self) -> None:
        self._stats = GeneratorStats(model="offline")
        self._lock = threading.Lock()

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        episode = generate_offline_episode(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)
        with self._lock:
            self._stats.episodes += 1
        return episode

    def stats(self) -> GeneratorStats:
        with self._lock:
            return self._stats.snapshot()


def validate_episode(
    episode: Episode,
    segment: Segment,
    *,
    episode_id: str | None = None,
    group_id: str | None = None,
    session_id: str | None = None,
    timestamp_margin: timedelta | None = timedelta(days=30),
) -> list[str]:
    """What is inconsistent between an episode and the segment it was made from; empty = valid.

    Checks ids and scope, that the sources are exactly the segment's messages in order, the
    count, non-blank text, and a timezone-aware timestamp that is neither in the future nor
    earlier than the segment's first message by more than ``timestamp_margin`` (None: no lower bound).
    """
    problems: list[str] = []
    if episode_id is not None and episode.uuid != episode_id:
        problems.append(f"uuid {episode.uuid!r} is not the planned id {episode_id!r}")
    if group_id is not None and episode.group_id != group_id:
        problems.append("group_id differs from the segment's group")
    if session_id is not None and episode.session_id != session_id:
        problems.append("session_id differs from the segment's session")
    if tuple(episode.source_message_ids) != segment.message_ids:
        problems.append("source_message_ids are not the segment's messages in order")
    if episode.message_count != len(segment.messages) or episode.message_count != len(episode.source_message_ids):
        problems.append(f"message_count {episode.message_count} does not match {len(segment.messages)} messages")
    if not episode.title.strip():
        problems.append("title is blank")
    if not episode.content.strip():
        problems.append("content is blank")
    if episode.timestamp.tzinfo is None or episode.timestamp.utcoffset() != timedelta(0):
        problems.append("timestamp is not UTC")
    elif episode.timestamp > utc_now() + CLOCK_SKEW and episode.timestamp > segment.earliest:
        problems.append("timestamp is in the future")
    elif timestamp_margin is not None and episode.timestamp < segment.earliest - timestamp_margin:
        problems.append("timestamp is implausibly earlier than the segment's first message")
    if episode.boundary_reason is not segment.boundary_reason:
        problems.append("boundary_reason differs from the segment's")
    return problems


@dataclass(frozen=True)
class GenerationJob:
    segment: Segment
    group_id: str
    session_id: str
    episode_id: str


def batch_generate_episodes(
    generator: EpisodeGenerator,
    jobs: Sequence[GenerationJob],
    *,
    concurrency: int = 1,
    timestamp_margin: timedelta | None = None,
) -> list[Episode]:
    """One episode per job, in job order, up to ``concurrency`` at a time.

    Each job is isolated: a generator that raises one of our typed errors or returns an
    inconsistent episode gets that job replaced by an offline fallback episode; the other
    jobs are unaffected. (LLM generators already fall back on LLM errors themselves.)
    """
    return list(generate_episodes(generator, jobs, concurrency=concurrency, timestamp_margin=timestamp_margin))


def generate_episodes(
    generator: EpisodeGenerator,
    jobs: Sequence[GenerationJob],
    *,
    concurrency: int = 1,
    timestamp_margin: timedelta | None = None,
) -> Iterator[Episode]:
    """``batch_generate_episodes`` one episode at a time, in job order, each as soon as it and those
    before it are done (the caller can use the first while the later ones are generated)."""
    if not jobs:
        return

    def run(job: GenerationJob) -> Episode:
        try:
            episode = generator.generate(
                job.segment, group_id=job.group_id, session_id=job.session_id, episode_id=job.episode_id
            )
        except (EpimemError, ValidationError) as error:
            log.warning("episode generation failed for one segment (%s); using a fallback episode", error)
            return _fallback(job)
        problems = validate_episode(
            episode,
            job.segment,
            episode_id=job.episode_id,
            group_id=job.group_id,
            session_id=job.session_id,
            timestamp_margin=timestamp_margin,
        )
        if problems:
            log.warning("generated episode is inconsistent (%s); using a fallback episode", "; ".join(problems))
            return _fallback(job)
        return episode

    if concurrency <= 1 or len(jobs) == 1:
        yield from (run(job) for job in jobs)
        return
    with ThreadPoolExecutor(max_workers=min(concurrency, len(jobs)), thread_name_prefix="epimem-gen") as pool:
        yield from pool.map(run, jobs)


def _fallback(job: GenerationJob) -> Episode:
    return generate_offline_episode(
        job.segment,
        group_id=job.group_id,
        session_id=job.session_id,
        episode_id=job.episode_id,
        method=GenerationMethod.FALLBACK,
    )
