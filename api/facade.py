"""The in-process Python facade: what notebooks, the command line and the HTTP routes use.

    from api.facade import Epimem
    memory = Epimem.from_settings(data_dir="./data")
    memory.add_messages("team", "chat-1", [{"id": "1", "content": "...", "producer_id": "ana"}])

Each method checks its arguments (ids, reserved names, ranges) and hands over to the memory service
(writes, lifecycle, the log) or the read path (search, context, timeline). Built by
``api.composition.build_service``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from api.composition import build_service
from api.corrections import Corrections
from api.operations import Operations
from api.settings import Settings
from memory import tracing
from memory.background import searching
from memory.embedding.embedder import ServiceEmbedder
from memory.episodes.generation import GeneratorStats, ReportingGenerator
from memory.errors import InvalidInputError, NotFoundError
from memory.ids import require_client_session, require_message_id, require_scope_ids
from memory.ingest.importers import LocomoSample
from memory.lifecycle.audit import LOCAL_ACTOR
from memory.lifecycle.export_format import ExportContents, read_export
from memory.lifecycle.reembed import Progress, ReembedReport
from memory.models import (
    Episode,
    GroupConfiguration,
    Message,
    SessionInfo,
    check_client_messages,
    check_client_metadata,
)
from memory.pages import MessagePage
from memory.readmodel.model import ReadModel
from memory.receipts import AddReceipt, DeletionReceipt, ImportReceipt
from memory.service import MemoryService, ServiceStats
from memory.timeutil import to_utc, utc_now
from memory.tracing import memory_operation
from memory.webhooks.hub import Webhooks
from retrieval.context import ContextBuilder
from retrieval.filters import filter_match, shown_episodes
from retrieval.overview import GroupStats, Histogram, Overview, SessionStats
from retrieval.search import Searcher
from retrieval.timeline import timeline as read_timeline
from retrieval.types import ContextQuery, ContextResult, Direction, Scope, SearchHit, SearchQuery, TimelinePage

MessageInput = Message | Mapping[str, Any]
MAX_HISTORY_LIMIT = 1000
MAX_SUMMARY_DAYS = 36_600


class Epimem(Corrections, Operations):
    """Everything epimem does, in process. Thread-safe."""

    def __init__(
        self,
        *,
        settings: Settings,
        memory: MemoryService,
        embedder: ServiceEmbedder,
        read_model: ReadModel,
        searcher: Searcher,
        context_builder: ContextBuilder,
        overview: Overview,
        webhooks: Webhooks,
    ) -> None:
        self.settings = settings
        self.memory = memory
        self.embedder = embedder
        self.read_model = read_model
        self.searcher = searcher
        self.context_builder = context_builder
        self._overview = overview
        self.webhooks = webhooks

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        background: bool = True,
        embedder: ServiceEmbedder | None = None,
        generator: ReportingGenerator | None = None,
        **overrides: Any,
    ) -> Epimem:
        """Build the service from settings (``api.composition.build_service``); ``overrides`` are
        settings fields. ``embedder`` shares one loaded model between services (tests, notebooks)."""
        parts = build_service(settings, background=background, embedder=embedder, generator=generator, **overrides)
        return cls(**vars(parts))

    def close(self) -> None:
        self.memory.close()

    # -- write ---------------------------------------------------------------------------------

    @memory_operation("create_memory", tracing.on_messages)
    def add_messages(
        self, group_id: str, session_id: str, messages: Iterable[MessageInput], *, actor: str = LOCAL_ACTOR
    ) -> AddReceipt:
        """Store messages durably (idempotent by id); episodes form in the background once enough
        messages are pending, or on ``flush``."""
        require_scope_ids(group_id, session_id)
        require_client_session(session_id)
        parsed = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        check_client_messages(parsed)
        return self.memory.add_messages(group_id, session_id, parsed, actor=actor)

    def flush(self, group_id: str, session_id: str, *, actor: str = LOCAL_ACTOR) -> list[Episode]:
        """Returns once every pending message of the session is in a stored, searchable episode."""
        require_scope_ids(group_id, session_id)
        return self.memory.flush(group_id, session_id, actor=actor)

    def flush_group(self, group_id: str, *, actor: str = LOCAL_ACTOR) -> list[Episode]:
        """Flush every session of a group in one batch (one embedding pass across sessions)."""
        require_scope_ids(group_id)
        return self.memory.flush_group(group_id, actor=actor)

    def ingest_locomo(self, sample: LocomoSample, *, group_id: str | None = None) -> list[Episode]:
        """One LoCoMo sample as one group (one session per LoCoMo session), formed in one batch."""
        target = group_id or sample.sample_id
        require_scope_ids(target)
        for messages in sample.sessions.values():
            check_client_messages(messages)
        return self.memory.ingest_sessions(target, sample.sessions)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self.memory.wait_idle(timeout)

    def recover(self) -> list[Episode]:
        """Finish what a crash interrupted: summary runs are rolled back, episodes are formed."""
        return self.memory.recover()

    # -- read ----------------------------------------------------------------------------------

    @memory_operation("search_memory", tracing.on_query, tracing.returned)
    def search(self, group_id: str, query: str | SearchQuery, **options: Any) -> list[SearchHit]:
        require_scope_ids(group_id)
        with searching():  # background writes wait (memory.background)
            return self.searcher.search(
                group_id, query if isinstance(query, SearchQuery) else SearchQuery(query=query, **options)
            )

    @memory_operation("search_memory", tracing.on_query, tracing.cited)
    def context(self, group_id: str, query: str | ContextQuery, **options: Any) -> ContextResult:
        require_scope_ids(group_id)
        request = query if isinstance(query, ContextQuery) else ContextQuery(query=query, **options)
        with searching():
            return self.context_builder.build(group_id, request)

    def timeline(
        self,
        group_id: str,
        *,
        session_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        order: Direction | str = Direction.ASC,
        **scope: Any,
    ) -> TimelinePage:
        require_scope_ids(group_id, session_id)
        read_scope = Scope(**scope)
        wanted = read_scope.filter
        group = self.read_model.reader(group_id)
        passing = functools.partial(shown_episodes, group, filter_match(group, wanted)) if wanted is not None else None
        return read_timeline(
            self.memory.store.vectors,
            group_id,
            session_id=session_id,
            scope=read_scope,
            limit=limit,
            cursor=cursor,
            direction=Direction(order),
            passing=passing,
            open_episodes=group.open_episodes().values(),
        )

    def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        require_scope_ids(group_id, session_id)
        episode = self.read_model.reader(group_id).episode(session_id, episode_id)
        if episode is None:
            raise NotFoundError(f"no episode {episode_id!r} in this session")
        return episode

    def episode_messages(self, group_id: str, episode: Episode) -> list[Message]:
        return self.read_model.reader(group_id).source_messages(episode)

    def get_message(self, group_id: str, session_id: str, message_id: str) -> Message:
        """One message as stored (whole: a citation's excerpt names its span of this content)."""
        require_scope_ids(group_id, session_id)
        require_message_id(message_id)
        return self.memory.message(group_id, session_id, message_id)

    def history(self, group_id: str, session_id: str, *, limit: int = 100, cursor: str | None = None) -> MessagePage:
        """The session's messages in event-time order, a page of ``limit`` (a list, with ``next_cursor``: pass it
        back as ``cursor`` for the next page; None on the last). Always scoped to one session."""
        require_scope_ids(group_id, session_id)
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            raise InvalidInputError(f"history needs 1 <= limit <= {MAX_HISTORY_LIMIT}")
        return self.memory.history(group_id, session_id, limit=limit, cursor=cursor)

    def pending_messages(self, group_id: str, session_id: str) -> int:
        require_scope_ids(group_id, session_id)
        return len(self.memory.messages(group_id, session_id, unfinished=True))

    # -- groups and sessions --------------------------------------------------------------------------

    def put_group(self, config: GroupConfiguration) -> GroupConfiguration:
        check_client_metadata(config.metadata, "group metadata")
        self.memory.put_group(config)
        return config

    def get_group(self, group_id: str) -> GroupConfiguration:
        require_scope_ids(group_id)
        return self.memory.group(group_id)

    def list_groups(self) -> list[str]:
        return self.memory.groups()

    def group_exists(self, group_id: str) -> bool:
        require_scope_ids(group_id)
        return self.memory.group_exists(group_id)

    def put_session(self, info: SessionInfo) -> SessionInfo:
        require_client_session(info.session_id)
        check_client_metadata(info.metadata, "session metadata")
        self.memory.put_session(info)
        return info

    def get_session(self, group_id: str, session_id: str) -> SessionInfo:
        require_scope_ids(group_id, session_id)
        return self.memory.session(group_id, session_id)

    def list_sessions(self, group_id: str) -> list[SessionInfo]:
        require_scope_ids(group_id)
        return self.memory.sessions(group_id)

    def group_overview(self, group_id: str) -> tuple[GroupStats, list[SessionStats]]:
        """The group's counts and its sessions' counts (messages, episodes, time spans)."""
        require_scope_ids(group_id)
        if not self.memory.group_exists(group_id):
            raise NotFoundError(f"group {group_id!r} not found: nothing is stored in it")
        return self._overview.group(group_id)

    def group_stats(self, group_id: str) -> GroupStats:
        require_scope_ids(group_id)
        return self._overview.group(group_id)[0]

    def timeline_histogram(self, group_id: str, scope: Scope, *, buckets: int) -> Histogram:
        """How many episodes of the scope (open episodes included, as in the timeline) fall in each of
        ``buckets`` slices of its window, per session."""
        require_scope_ids(group_id)
        opened = self.read_model.reader(group_id).open_episodes().values()
        return self._overview.histogram(group_id, scope, buckets=buckets, open_episodes=opened)

    def vector_count(self, group_id: str) -> int:
        require_scope_ids(group_id)
        return self.memory.vector_count(group_id)

    # -- lifecycle: deletion, summaries, export and import, model change ------------------------------

    @memory_operation("delete_memory", tracing.on_group, tracing.removed)
    def delete_session(self, group_id: str, session_id: str, *, actor: str = LOCAL_ACTOR) -> DeletionReceipt:
        """The session's partition, messages and records; group summaries citing it are rebuilt
        from what remains (or removed). ``GROUP_SUMMARY_SESSION`` deletes every group summary."""
        require_scope_ids(group_id, session_id)
        return self.memory.delete_session(group_id, session_id, actor=actor)

    @memory_operation("delete_memory_store", tracing.on_group)
    def delete_group(self, group_id: str, *, actor: str = LOCAL_ACTOR) -> DeletionReceipt:
        """Everything of the group, in every collection. Idempotent; see memory.service for what
        happens to adds that run at the same time."""
        require_scope_ids(group_id)
        return self.memory.delete_group(group_id, actor=actor)

    @memory_operation("delete_memory", tracing.on_message, tracing.removed)
    def delete_message(
        self, group_id: str, session_id: str, message_id: str, *, actor: str = LOCAL_ACTOR
    ) -> DeletionReceipt:
        """The message (log and vectors); its episode is regenerated from the remaining messages
        with the same generator, or deleted when none remain; summaries citing it are rebuilt."""
        require_scope_ids(group_id, session_id)
        return self.memory.delete_message(group_id, session_id, message_id, actor=actor)

    @memory_operation("delete_memory", tracing.on_episode, tracing.removed)
    def delete_episode(
        self, group_id: str, session_id: str, episode_id: str, *, actor: str = LOCAL_ACTOR
    ) -> DeletionReceipt:
        """An episode with the messages it was made of (summaries citing it are rebuilt), or a
        summary alone (its sources stay and lose their ``summarised_by`` mark)."""
        require_scope_ids(group_id, session_id)
        return self.memory.delete_episode(group_id, session_id, episode_id, actor=actor)

    def generate_summaries(
        self,
        group_id: str,
        *,
        days_back: float,
        max_memories_per_summary: int,
        session_id: str | None = None,
        reference_time: datetime | None = None,
        actor: str = LOCAL_ACTOR,
    ) -> list[Episode]:
        """Summaries of the episodes of the last ``days_back`` days (before ``reference_time``, default
        now) not yet summarised, at most ``max_memories_per_summary`` episodes each; the sources are
        marked ``summarised_by`` in the same all-or-nothing operation and never deleted.
        ``session_id`` None = group-wide summaries (kept in ``GROUP_SUMMARY_SESSION``)."""
        require_scope_ids(group_id, session_id)
        if session_id is not None:
            require_client_session(session_id)
        if not (isinstance(days_back, int | float) and 0 < days_back <= MAX_SUMMARY_DAYS):
            raise InvalidInputError(f"days_back must be a number of days in (0, {MAX_SUMMARY_DAYS}]")
        end = to_utc(reference_time) if reference_time is not None else utc_now()
        start = end - timedelta(days=float(days_back))
        return self.memory.generate_summaries(group_id, session_id, start, end, max_memories_per_summary, actor=actor)

    def summary_sources(self, group_id: str, summary: Episode) -> list[Episode]:
        """The episodes a summary compacts, in time order (expand further with ``episode_messages``)."""
        require_scope_ids(group_id)
        found = self.read_model.reader(group_id).episodes(list(summary.source_episode_ids))
        return sorted(found.values(), key=lambda e: (e.timestamp, e.uuid))

    def export_group(self, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
        """The group as epimem JSON Lines (format in memory.lifecycle.export_format); each line ends
        with a newline."""
        require_scope_ids(group_id)
        return self.memory.export_group(group_id, include_embeddings=include_embeddings)

    def import_group(
        self,
        lines: Iterable[str] | ExportContents,
        *,
        group_id: str | None = None,
        actor: str = LOCAL_ACTOR,
        restore: bool = True,
    ) -> ImportReceipt:
        """Import an export (into ``group_id``, default the exported group): it adds what the group lacks and
        never changes what it holds (memory.lifecycle.importing). ``restore`` (in process: yes) lets it carry
        what epimem made (episodes, summaries, revisions, embeddings); without it, sessions and messages only.
        The whole file is checked before anything is written (``lines`` may be it, already read: ``read_export``);
        importing twice is a no-op."""
        require_scope_ids(group_id)
        contents = lines if isinstance(lines, ExportContents) else read_export(lines)
        return self.memory.import_group(contents, group_id=group_id, actor=actor, restore=restore)

    def reembed(self, group_id: str | None = None, progress: Progress | None = None) -> ReembedReport:
        """Rebuild the vectors of one group (or all) from the stored text with the configured model
        and record it; ``progress(done, total)`` is called as vectors are embedded."""
        require_scope_ids(group_id)
        return self.memory.reembed(group_id, progress)

    # -- operations -------------------------------------------------------------------------------------

    def generator_stats(self) -> GeneratorStats:
        return self.memory.stats().generator

    def stats(self) -> ServiceStats:
        """One snapshot of the service's counters (what ``/metrics`` exports)."""
        return self.memory.stats()

    def heartbeat(self) -> None:
        """Raises ``StoreUnavailableError`` when the store cannot be reached."""
        self.memory.heartbeat()
