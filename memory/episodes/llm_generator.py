"""Episodes written by an LLM, validated and sanitised, with an offline fallback on any LLM failure."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memory.episodes.generation import GeneratorStats
from memory.episodes.offline import episode_from_segment, generate_offline_episode, offline_title
from memory.episodes.prompts import PROMPT_VERSION, episode_messages
from memory.errors import InvalidInputError
from memory.llm.client import JsonReply, LLMClient, LLMError
from memory.llm.stats import Usage
from memory.models import Episode, GenerationMethod, Message, Segment
from memory.timeutil import parse_timestamp, utc_now

log = logging.getLogger("epimem.llm")

MAX_TITLE_CHARS = 200
MAX_CONTENT_CHARS = 12_000


@dataclass(frozen=True)
class SanitisedEpisode:
    title: str
    content: str
    timestamp: datetime
    repairs: tuple[str, ...] = ()


def _bound(text: str, limit: int) -> str:
    """Cut at the last word boundary before ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + "…"


def resolve_timestamp(
    candidate: datetime | None, messages: Sequence[Message], *, margin: timedelta, now: datetime | None = None
) -> datetime:
    """The LLM's timestamp if plausible (not in the future, not earlier than the earliest message
    by more than ``margin``), else the earliest message's time, else now. Always UTC."""
    now = now or utc_now()
    earliest = min((m.timestamp for m in messages), default=None)
    if candidate is not None and candidate <= now and (earliest is None or candidate >= earliest - margin):
        return candidate
    return earliest if earliest is not None else now


def sanitise_episode(
    data: dict[str, Any], segment: Segment, *, margin: timedelta, now: datetime | None = None
) -> SanitisedEpisode:
    """Title, content and timestamp from an LLM answer.

    A missing or blank title is repaired (the offline title); a missing, blank or non-text
    content is rejected (LLMError kind ``schema``); lengths are bounded; an unreadable or
    implausible timestamp is replaced by the earliest message's time.
    """
    repairs: list[str] = []
    raw_content = data.get("content")
    if isinstance(raw_content, list) and raw_content and all(isinstance(item, str) for item in raw_content):
        raw_content = "\n".join(raw_content)
        repairs.append("content_list")
    if not isinstance(raw_content, str):
        raise LLMError(f"episode content is {type(raw_content).__name__}, not text", kind="schema")
    content = "\n".join(line.strip() for line in raw_content.strip().splitlines() if line.strip())
    if not content:
        raise LLMError("episode content is blank", kind="schema")
    if len(content) > MAX_CONTENT_CHARS:
        content = _bound(content, MAX_CONTENT_CHARS)
        repairs.append("content_length")

    raw_title = data.get("title")
    title = " ".join(raw_title.split()).strip("\"'#* ") if isinstance(raw_title, str) else ""
    if not title:
        title = offline_title(segment)
        repairs.append("title")
    elif len(title) > MAX_TITLE_CHARS:
        title = _bound(title, MAX_TITLE_CHARS)
        repairs.append("title_length")

    raw_timestamp = data.get("timestamp")
    candidate: datetime | None = None
    if isinstance(raw_timestamp, str) and raw_timestamp.strip():
        try:
            candidate = parse_timestamp(raw_timestamp)
        except InvalidInputError:
            repairs.append("timestamp_unreadable")
    elif raw_timestamp not in (None, ""):
        repairs.append("timestamp_type")
    timestamp = resolve_timestamp(candidate, segment.messages, margin=margin, now=now)
    if candidate is not None and timestamp != candidate:
        repairs.append("timestamp_implausible")
    return SanitisedEpisode(title=title, content=content, timestamp=timestamp, repairs=tuple(repairs))


class LLMEpisodeGenerator:
    """Implements EpisodeGenerator with an LLM. Never raises for an LLM failure: transport
    errors, HTTP errors, timeouts, invalid JSON and schema violations all give a complete
    offline-built episode marked ``GenerationMethod.FALLBACK``. Thread-safe."""

    def __init__(self, client: LLMClient, *, timestamp_margin: timedelta = timedelta(days=30)) -> None:
        self._client = client
        self._margin = timestamp_margin
        self._lock = threading.Lock()
        self._stats = GeneratorStats(model=client.model, prompt_version=PROMPT_VERSION)

    @property
    def client(self) -> LLMClient:
        return self._client

    @property
    def concurrency(self) -> int:
        return self._client.concurrency

    @property
    def timestamp_margin(self) -> timedelta:
        return self._margin

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        try:
            reply = self._client.complete_json(
                episode_messages(segment.messages, segment.boundary_reason, topic=segment.topic)
            )
        except LLMError as error:
            self._record(error.attempts, error.latency_seconds, error.usage, error=error.kind)
            log.warning("LLM episode generation failed (%s); fallback episode", error.kind)
            return self._fallback(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)
        try:
            fields = sanitise_episode(reply.data, segment, margin=self._margin)
        except LLMError as error:
            self._record_reply(reply, error=error.kind)
            log.warning("LLM episode rejected (%s); fallback episode", error.message)
            return self._fallback(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)
        self._record_reply(reply, repairs=len(fields.repairs))
        return episode_from_segment(
            segment,
            group_id=group_id,
            session_id=session_id,
            episode_id=episode_id,
            title=fields.title,
            content=fields.content,
            timestamp=fields.timestamp,
            method=GenerationMethod.LLM,
        )

    def stats(self) -> GeneratorStats:
        with self._lock:
            return self._stats.snapshot()

    def _fallback(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        with self._lock:
            self._stats.fallbacks += 1
            self._stats.episodes += 1
        return generate_offline_episode(
            segment,
            group_id=group_id,
            session_id=session_id,
            episode_id=episode_id,
            method=GenerationMethod.FALLBACK,
        )

    def _record_reply(self, reply: JsonReply, *, error: str | None = None, repairs: int = 0) -> None:
        self._record(reply.attempts, reply.latency_seconds, reply.usage, error=error, repairs=repairs)
        if error is None:
            with self._lock:
                self._stats.episodes += 1

    def _record(
        self, attempts: int, latency: float, usage: Usage, *, error: str | None = None, repairs: int = 0
    ) -> None:
        with self._lock:
            self._stats.record_call(attempts, latency, usage, error=error)
            self._stats.repairs += 1 if repairs else 0
