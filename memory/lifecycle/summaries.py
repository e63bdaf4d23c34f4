"""Summaries: compactions of many episodes over a period, linked to every source, never destructive.

A summary is an ``Episode`` with ``episode_type=SUMMARY`` that records the period its sources
span (``period_start``/``period_end``), the ids of every source episode
(``source_episode_ids``, whose length is the unit count) and of every source message
(``source_message_ids``, ``message_count``). Each source episode gets ``summarised_by`` set to
the summary's id; sources are never deleted.

Where summaries live:

- a summary of one session lives in that session's partition (``session_id`` = the session);
- a group-wide summary lives in the group's reserved summary partition, session id
  ``GROUP_SUMMARY_SESSION``; that session id is refused for messages.

Both are in the group index too, so search, timeline and context see them like episodes.

Writing is all-or-nothing: a journal record (kind ``summary_plan``) naming the summaries and
their sources is written to the group log first and removed last. If a write fails, the
summaries written so far are deleted and the markers set so far are cleared before the error
is re-raised; if even that fails (the store went away), ``rollback_unfinished`` does it on the
next ``recover()`` or the next summary run of the group.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.embedding.embedder import Embedder
from memory.episodes.generation import EpisodeGenerator
from memory.episodes.offline import MAX_TITLE_CHARS
from memory.errors import EpimemError, InvalidInputError
from memory.ids import GROUP_SUMMARY_SESSION
from memory.models import BoundaryReason, Episode, EpisodeType, GenerationMethod, Message, Role, Segment
from memory.receipts import DeletionReceipt
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import RecordFilter, RecordKind, VectorRecord
from memory.text import episode_embedding_text
from memory.timeutil import format_date, to_epoch, utc_now

log = logging.getLogger("epimem.summaries")

PLAN_KIND = "summary_plan"
MAX_UNITS_PER_SUMMARY = 1000
_SUMMARY_NAMESPACE = uuid.UUID("0b7e2f59-1c4d-4f0e-8a3b-5d6c7e8f9a01")
_LEAD_CHARS = 160


def summary_id_for(group_id: str, scope_session: str, source_episode_ids: Sequence[str]) -> str:
    """Deterministic: summarising the same episodes again gives the same id (a retry overwrites)."""
    return str(uuid.uuid5(_SUMMARY_NAMESPACE, "\x1f".join([group_id, scope_session, *source_episode_ids])))


def _lead(episode: Episode) -> str:
    """The first line of an episode that says something (offline episodes open with a date line)."""
    for line in episode.content.splitlines():
        text = " ".join(line.split())
        if text and not (text.startswith("On ") and text.endswith(":")):
            return text if len(text) <= _LEAD_CHARS else text[: _LEAD_CHARS - 1].rstrip() + "…"
    return ""


def _subjects(sources: Sequence[Episode], limit: int = 4) -> list[str]:
    """The most frequent subjects of the sources' titles (offline titles read 'speakers: a, b, c')."""
    counts: Counter[str] = Counter()
    for episode in sources:
        subject = episode.title.split(": ", 1)[-1]
        counts.update(part.strip() for part in subject.split(",") if part.strip())
    return [subject for subject, _ in counts.most_common(limit)]


def offline_summary_text(sources: Sequence[Episode]) -> tuple[str, str]:
    """Title and content from the episodes themselves: one dated line per episode."""
    subject = ", ".join(_subjects(sources)) or "memory"
    first, last = sources[0].timestamp, sources[-1].timestamp
    title = f"Summary {first:%d %b %Y}–{last:%d %b %Y}: {subject}"[:MAX_TITLE_CHARS]
    count = sum(e.message_count for e in sources)
    lines = [f"Summary of {len(sources)} episodes ({count} messages) from {format_date(first)} to {format_date(last)}:"]
    for episode in sources:
        lead = _lead(episode)
        lines.append(f"- {format_date(episode.timestamp)}: {episode.title}" + (f" — {lead}" if lead else ""))
    return title, "\n".join(lines)


@dataclass(frozen=True)
class PlannedSummary:
    summary: Episode
    sources: tuple[Episode, ...]


class Summariser:
    """Builds, writes, repairs and rolls back summaries. ``generator`` None = offline text."""

    def __init__(
        self, *, log: LogWriter, vectors: VectorWriter, embedder: Embedder, generator: EpisodeGenerator | None = None
    ) -> None:
        self._log = log
        self._vectors = vectors
        self._embedder = embedder
        self._generator = generator

    # -- building ------------------------------------------------------------------------------

    def build(self, group_id: str, scope_session: str, summary_id: str, sources: Sequence[Episode]) -> Episode:
        """One summary over ``sources`` (sorted by time), through the LLM when one is configured."""
        sources = sorted(sources, key=lambda e: (e.timestamp, e.uuid))
        title, content = offline_summary_text(sources)
        method = GenerationMethod.OFFLINE
        if self._generator is not None:
            title, content, method = self._generate(group_id, scope_session, summary_id, sources, title, content)
        message_ids = tuple(m for e in sources for m in e.source_message_ids)
        return Episode(
            uuid=summary_id,
            episode_type=EpisodeType.SUMMARY,
            title=title,
            content=content,
            timestamp=sources[0].timestamp,
            created_at=utc_now(),
            group_id=group_id,
            session_id=scope_session,
            source_message_ids=message_ids,
            message_count=len(message_ids),
            source_episode_ids=tuple(e.uuid for e in sources),
            period_start=sources[0].timestamp,
            period_end=max(e.timestamp for e in sources),
            boundary_reason=BoundaryReason.FLUSH,
            generation=method,
        )

    def _generate(
        self,
        group_id: str,
        scope_session: str,
        summary_id: str,
        sources: Sequence[Episode],
        title: str,
        content: str,
    ) -> tuple[str, str, GenerationMethod]:
        """The episode-generator seam, fed one pseudo-message per source episode."""
        assert self._generator is not None
        messages = tuple(
            Message(
                id=e.uuid,
                role=Role.SYSTEM,
                content=f"{e.title}\n{e.content}",
                timestamp=e.timestamp,
                producer_id="memory",
            )
            for e in sources
        )
        segment = Segment(messages=messages, boundary_reason=BoundaryReason.FLUSH)
        try:
            made = self._generator.generate(segment, group_id=group_id, session_id=scope_session, episode_id=summary_id)
        except EpimemError as error:
            log.warning("summary generation failed (%s); using the offline summary", error.message)
            return title, content, GenerationMethod.FALLBACK
        if made.generation != GenerationMethod.LLM:
            return title, content, GenerationMethod.FALLBACK
        return made.title, made.content, GenerationMethod.LLM

    def candidates(self, group_id: str, session_id: str | None, start: datetime, end: datetime) -> list[Episode]:
        """Episodes in [start, end] not yet summarised, in time order."""
        selection = RecordFilter(
            kinds=(RecordKind.EPISODE,),
            session_ids=(session_id,) if session_id is not None else None,
            since=to_epoch(start),
            until=to_epoch(end),
        )
        episodes = [e for e in self._vectors.episodes(group_id, selection=selection) if not e.summarised_by]
        return sorted(episodes, key=lambda e: (e.timestamp, e.uuid))

    def plan(
        self, group_id: str, session_id: str | None, start: datetime, end: datetime, max_units: int
    ) -> list[PlannedSummary]:
        if not 1 <= max_units <= MAX_UNITS_PER_SUMMARY:
            raise InvalidInputError(f"max_memories_per_summary must be between 1 and {MAX_UNITS_PER_SUMMARY}")
        if end < start:
            raise InvalidInputError("the summary period ends before it starts")
        scope_session = session_id or GROUP_SUMMARY_SESSION
        episodes = self.candidates(group_id, session_id, start, end)
        planned = []
        for first in range(0, len(episodes), max_units):
            chunk = tuple(episodes[first : first + max_units])
            summary_id = summary_id_for(group_id, scope_session, [e.uuid for e in chunk])
            planned.append(PlannedSummary(self.build(group_id, scope_session, summary_id, chunk), chunk))
        return planned

    # -- writing, all or nothing -------------------------------------------------------------------

    def write(self, group_id: str, planned: Sequence[PlannedSummary]) -> list[Episode]:
        if not planned:
            return []
        summaries = [p.summary for p in planned]
        vectors = self._embedder.embed_batch([episode_embedding_text(s) for s in summaries])
        plan_id = f"plan-{summaries[0].uuid}"
        journal = {
            "summaries": [[s.session_id, s.uuid] for s in summaries],
            "sources": [[e.session_id, e.uuid] for p in planned for e in p.sources],
        }
        self._log.put_record(group_id, plan_id, json.dumps(journal), {"kind": PLAN_KIND})
        try:
            by_session: dict[str, list[VectorRecord]] = defaultdict(list)
            for summary, vector in zip(summaries, vectors, strict=True):
                by_session[summary.session_id].append(VectorRecord.of_episode(summary, vector))
            for session_id, records in by_session.items():
                self._vectors.upsert(group_id, session_id, records)
            marks: dict[str, list[tuple[str, str]]] = defaultdict(list)
            for p in planned:
                for source in p.sources:
                    marks[source.session_id].append((source.uuid, p.summary.uuid))
            for session_id, pairs in marks.items():
                self._vectors.update_metadata(
                    group_id, session_id, [e for e, _ in pairs], [{"summarised_by": s} for _, s in pairs]
                )
            self._log.delete_records(group_id, [plan_id])
        except BaseException:
            # Whatever failed, the caller sees an error: then nothing of the run may remain.
            try:
                self._rollback(group_id, plan_id, journal)
            except EpimemError as error:
                log.error("summary rollback failed (%s); it is retried on recover()", error.message)
            raise
        return summaries

    def _rollback(self, group_id: str, plan_id: str, journal: dict[str, list[list[str]]]) -> None:
        summary_ids = {summary_id for _, summary_id in journal["summaries"]}
        by_session: dict[str, list[str]] = defaultdict(list)
        for session_id, summary_id in journal["summaries"]:
            by_session[session_id].append(summary_id)
        for session_id, ids in by_session.items():
            self._vectors.delete(group_id, session_id, ids)
        sources: dict[str, list[str]] = defaultdict(list)
        for session_id, episode_id in journal["sources"]:
            sources[session_id].append(episode_id)
        for session_id, ids in sources.items():
            found = self._vectors.episodes(group_id, ids=ids, selection=RecordFilter(session_ids=(session_id,)))
            self._clear_marks(group_id, session_id, [e.uuid for e in found if e.summarised_by in summary_ids])
        self._log.delete_records(group_id, [plan_id])

    def _clear_marks(self, group_id: str, session_id: str, episode_ids: list[str]) -> None:
        """Remove ``summarised_by`` from episodes (a key updated to None is removed)."""
        if episode_ids:
            cleared = [{"summarised_by": None} for _ in episode_ids]
            self._vectors.update_metadata(group_id, session_id, episode_ids, cleared)

    def rollback_unfinished(self, group_id: str) -> int:
        """Undo summary runs that neither finished nor rolled back (the process died, the store failed)."""
        plans = self._log.records(group_id, PLAN_KIND)
        for plan_id, document, _ in plans:
            self._rollback(group_id, plan_id, json.loads(document))
        return len(plans)

    # -- repair after deletions --------------------------------------------------------------------

    def summaries_citing(self, group_id: str, episode_ids: set[str]) -> list[Episode]:
        summaries = self._vectors.episodes(group_id, selection=RecordFilter(kinds=(RecordKind.SUMMARY,)))
        return [s for s in summaries if episode_ids & set(s.source_episode_ids)]

    def refresh(self, group_id: str, summary: Episode) -> tuple[Episode | None, DeletionReceipt]:
        """Rebuild a summary from the sources that still exist (same id), or delete it if none do.

        Returns the rebuilt summary (None when it was deleted) and what was removed.
        """
        found = self._vectors.episodes(group_id, ids=list(summary.source_episode_ids))
        sources = [e for e in found if e.episode_type is EpisodeType.EPISODE]
        if not sources:
            count, removed = self._vectors.delete(group_id, summary.session_id, [summary.uuid])
            return None, DeletionReceipt(vectors=count, ids=removed, summaries=[summary.uuid])
        rebuilt = self.build(group_id, summary.session_id, summary.uuid, sources)
        vector = self._embedder.embed_batch([episode_embedding_text(rebuilt)])[0]
        self._vectors.replace(group_id, summary.session_id, VectorRecord.of_episode(rebuilt, vector))
        return rebuilt, DeletionReceipt(repaired=[rebuilt.uuid])

    def unmark(self, group_id: str, summary: Episode) -> None:
        """Clear ``summarised_by`` on the sources of a summary that is going away."""
        by_session: dict[str, list[str]] = defaultdict(list)
        for source in self._vectors.episodes(group_id, ids=list(summary.source_episode_ids)):
            if source.summarised_by == summary.uuid:
                by_session[source.session_id].append(source.uuid)
        for session_id, ids in by_session.items():
            self._clear_marks(group_id, session_id, ids)
