"""The in-process Python facade, and the composition root that builds it from settings.

from api.facade import Epimem
memory = Epimem.from_settings(data_dir="./data")
memory.add_messages("team", "chat-1", [{"id": "1", "content": "...", "producer_id": "ana"}])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

from memory.connection import open_connection
from memory.coordination import Coordinator, LeaseCoordinator, LocalCoordinator
from memory.embedding import SentenceTransformerEmbedder
from memory.errors import InvalidInputError, NotFoundError
from memory.folder_lock import release_folder
from memory.generation import EpisodeGenerator, GeneratorStats, OfflineEpisodeGenerator
from memory.importers import LocomoSample
from memory.ingestion import AddReceipt, Ingestor
from memory.lazy_embedding import LazyEmbedder
from memory.lifecycle import GroupGate, Lifecycle, Progress, ReembedReport
from memory.llm import client_from_settings
from memory.llm_generator import LLMEpisodeGenerator
from memory.llm_segmenter import LLMSegmenter
from memory.models import (
    BoundaryReason,
    Episode,
    GroupConfiguration,
    Message,
    MessageState,
    SessionInfo,
    check_scope_id,
)
from memory.segmentation import HeuristicSegmenter, SegmentationPolicy, Segmenter, policy_from_settings
from memory.settings import Settings
from memory.store import ChromaStore, DeletionReceipt, episode_from_record
from memory.summaries import GROUP_SUMMARY_SESSION, Summariser
from memory.timeutil import to_utc, utc_now
from memory.transfer import ImportReceipt, import_group, read_export
from memory.transfer import export_group as export_lines
from memory.worker import FormationWorker
from retrieval.context import ContextBuilder
from retrieval.search import Searcher
from retrieval.timeline import timeline as read_timeline
from retrieval.types import ContextQuery, ContextResult, Direction, Scope, SearchHit, SearchQuery, TimelinePage

log = logging.getLogger("epimem")

MessageInput = Message | Mapping[str, Any]


def _scope_ids(*ids: str) -> None:
    for value in ids:
        try:
            check_scope_id(value)
        except ValueError as error:  # a plain ValueError from the model validator: make it a 422
            raise InvalidInputError(f"invalid group or session id: {error}") from error


def _not_reserved(session_id: str) -> None:
    if session_id == GROUP_SUMMARY_SESSION:
        raise InvalidInputError(f"session id {GROUP_SUMMARY_SESSION!r} is reserved for group summaries")


MAX_HISTORY_LIMIT = 1000
MAX_SUMMARY_DAYS = 36_600


def _lazy_embedder(settings: Settings) -> LazyEmbedder:
    """The configured embedder, loaded on first use (commands that embed nothing never load it)."""

    def load() -> SentenceTransformerEmbedder:
        return SentenceTransformerEmbedder(
            model=settings.embedding_model,
            device=settings.embedding_device,
            backend=settings.embedding_backend,
            onnx_dir=settings.data_dir / "models",
            batch_size=settings.embedding_batch_size,
            cache_size=settings.embedding_cache_size,
        )

    return LazyEmbedder(model=settings.embedding_model, backend=settings.embedding_backend, load=load)


class Epimem:
    """Everything epimem does, in process. Thread-safe."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: ChromaStore,
        embedder: SentenceTransformerEmbedder,
        generator: EpisodeGenerator,
        background: bool = True,
        coordinator: Coordinator | None = None,
    ) -> None:
        self.settings = settings
        self.generator = generator
        self.store = store
        self.embedder = embedder
        policy = policy_from_settings(settings)
        self.ingestor = Ingestor(
            store=store,
            embedder=embedder,
            generator=generator,
            policy=policy,
            auto_flush_pending=settings.auto_flush_pending,
            coordinator=coordinator,
            segmenter=build_segmenter(settings, policy, generator),
            generation_concurrency=settings.llm_concurrency if isinstance(generator, LLMEpisodeGenerator) else 1,
        )
        self.coordinator = coordinator
        self.searcher = Searcher(store=store, embedder=embedder)
        wordpieces = embedder.count_tokens if settings.context_token_count == "wordpieces" else None
        self.context_builder = ContextBuilder(searcher=self.searcher, count_wordpieces=wordpieces)
        # Lifecycle operations hold a group exclusively; adds hold it shared (memory.lifecycle).
        self.gate = GroupGate()
        self.summariser = Summariser(
            store=store, embedder=embedder, generator=generator if settings.llm_configured else None
        )
        self.lifecycle = Lifecycle(store=store, embedder=embedder, generator=generator, summariser=self.summariser)
        scan = settings.formation_scan_interval_s
        if scan is None:
            scan = 60.0 if settings.chroma_host else 0.0
        self.worker = FormationWorker(self.ingestor, scan_interval_s=scan) if background else None

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        background: bool = True,
        embedder: SentenceTransformerEmbedder | None = None,
        **overrides: Any,
    ) -> Epimem:
        """The composition root: the only place that reads settings.

        ``embedder`` lets several services in one process share one loaded model (tests, notebooks).
        """
        if settings is None:
            settings = Settings(**overrides)
        elif overrides:
            settings = Settings(**{**settings.model_dump(), **overrides})
        embedder = embedder or _lazy_embedder(settings)
        connection = open_connection(
            data_dir=settings.data_dir,
            host=settings.chroma_host,
            port=settings.chroma_port,
            ssl=settings.chroma_ssl,
            timeout_s=settings.chroma_timeout_s,
            recycle_after=settings.chroma_recycle_after,
            max_open=settings.chroma_max_open,
        )
        store = ChromaStore(connection=connection, model_id=embedder.model_id)
        generator = build_generator(settings)
        return cls(
            settings=settings,
            store=store,
            embedder=embedder,
            generator=generator,
            background=background,
            coordinator=build_coordinator(settings, store),
        )

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if not self.settings.chroma_host and not getattr(self, "_released", False):
            self._released = True
            release_folder(self.settings.data_dir)  # taken by open_connection
        if isinstance(self.coordinator, LeaseCoordinator):
            self.coordinator.close()
        if isinstance(self.generator, LLMEpisodeGenerator):
            self.generator.client.close()

    # -- write ---------------------------------------------------------------------------------

    def add_messages(self, group_id: str, session_id: str, messages: Iterable[MessageInput]) -> AddReceipt:
        """Store messages durably (idempotent by id); episodes form in the background once enough
        messages are pending, or on ``flush``."""
        _scope_ids(group_id, session_id)
        _not_reserved(session_id)
        parsed = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        with self.gate.shared(group_id):
            receipt = self.ingestor.add_messages(group_id, session_id, parsed)
        if self.ingestor.needs_formation(receipt):
            if self.worker is not None:
                self.worker.submit(group_id, session_id)
            else:
                self.ingestor.form_closed(group_id, session_id)
        return receipt

    def flush(self, group_id: str, session_id: str, *, reason: BoundaryReason = BoundaryReason.FLUSH) -> list[Episode]:
        """Returns once every pending message of the session is in a stored, searchable episode."""
        _scope_ids(group_id, session_id)
        return self.ingestor.flush(group_id, session_id, reason=reason)

    def flush_group(self, group_id: str) -> list[Episode]:
        """Flush every session of a group in one batch (one embedding pass across sessions)."""
        _scope_ids(group_id)
        sessions = [(group_id, info.session_id) for info in self.store.list_sessions(group_id)]
        return self.ingestor.form(sessions, close_tail=True)

    def ingest_locomo(self, sample: LocomoSample, *, group_id: str | None = None) -> list[Episode]:
        """One LoCoMo sample as one group (one session per LoCoMo session), formed in one batch."""
        group_id = group_id or sample.sample_id
        for session_id, messages in sample.sessions.items():
            with self.gate.shared(group_id):
                self.ingestor.add_messages(group_id, session_id, messages)
        return self.ingestor.form([(group_id, s) for s in sample.sessions], close_tail=True)

    def generator_stats(self) -> GeneratorStats:
        return self.generator.stats()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self.worker.wait_idle(timeout) if self.worker is not None else True

    def recover(self) -> list[Episode]:
        """Finish what a crash interrupted: summary runs are rolled back, episodes are formed."""
        for group_id in self.store.list_groups():
            if self.summariser.rollback_unfinished(group_id):
                self.searcher.forget_group(group_id)
        return self.ingestor.recover()

    # -- read ----------------------------------------------------------------------------------

    def search(self, group_id: str, query: str | SearchQuery, **options: Any) -> list[SearchHit]:
        _scope_ids(group_id)
        search = query if isinstance(query, SearchQuery) else SearchQuery(query=query, **options)
        return self.searcher.search(group_id, search)

    def context(self, group_id: str, query: str | ContextQuery, **options: Any) -> ContextResult:
        _scope_ids(group_id)
        request = query if isinstance(query, ContextQuery) else ContextQuery(query=query, **options)
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
        _scope_ids(group_id)
        if session_id is not None:
            _scope_ids(session_id)
        return read_timeline(
            self.store,
            group_id,
            session_id=session_id,
            scope=Scope(**scope),
            limit=limit,
            cursor=cursor,
            direction=Direction(order),
        )

    def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        _scope_ids(group_id, session_id)
        records = self.store.get_vectors(group_id, session_id=session_id, ids=[episode_id])
        for record in records:
            if record.metadata.get("kind") in ("episode", "summary"):
                return episode_from_record(record.document, record.metadata)
        raise NotFoundError(f"no episode {episode_id!r} in this session")

    def episode_messages(self, group_id: str, episode: Episode) -> list[Message]:
        return self.searcher.source_messages(group_id, episode)

    def history(self, group_id: str, session_id: str, *, limit: int = 100, offset: int = 0) -> list[Message]:
        """The session's messages in event-time order, paged. Always scoped to one session."""
        _scope_ids(group_id, session_id)
        if not 1 <= limit <= MAX_HISTORY_LIMIT or offset < 0:
            raise InvalidInputError(f"history needs 1 <= limit <= {MAX_HISTORY_LIMIT} and offset >= 0")
        stored = self.store.list_messages(group_id, session_id)
        return [s.message for s in stored[offset : offset + limit]]

    def pending_messages(self, group_id: str, session_id: str) -> int:
        _scope_ids(group_id, session_id)
        states = [MessageState.PENDING, MessageState.FORMING]
        return len(self.store.list_messages(group_id, session_id, states=states))

    # -- sessions and groups --------------------------------------------------------------------------

    def put_group(self, config: GroupConfiguration) -> GroupConfiguration:
        self.store.put_group_config(config)
        return config

    def get_group(self, group_id: str) -> GroupConfiguration:
        _scope_ids(group_id)
        config = self.store.get_group_config(group_id)
        if config is None:
            if not self.store.list_sessions(group_id):
                raise NotFoundError("group not found")
            config = GroupConfiguration(group_id=group_id)
        return config

    def put_session(self, info: SessionInfo) -> SessionInfo:
        _not_reserved(info.session_id)
        self.store.put_session_info(info)
        return info

    def get_session(self, group_id: str, session_id: str) -> SessionInfo:
        _scope_ids(group_id, session_id)
        info = self.store.get_session_info(group_id, session_id)
        if info is None:
            raise NotFoundError("session not found")
        return info

    def list_sessions(self, group_id: str) -> list[SessionInfo]:
        _scope_ids(group_id)
        return self.store.list_sessions(group_id)

    def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        """The session's partition, messages and records; group summaries citing it are rebuilt
        from what remains (or removed). ``GROUP_SUMMARY_SESSION`` deletes every group summary."""
        _scope_ids(group_id, session_id)
        with self.gate.exclusive(group_id):
            with self._hold(group_id, [session_id]):
                receipt = self.lifecycle.delete_session(group_id, session_id)
            self.lifecycle.purge_lease_residue(group_id, [session_id], group_deleted=False)
        return self._cleared(group_id, receipt)

    def delete_group(self, group_id: str) -> DeletionReceipt:
        """Everything of the group, in every collection. Idempotent; see memory.lifecycle for what
        happens to adds that run at the same time."""
        _scope_ids(group_id)
        with self.gate.exclusive(group_id):
            sessions = [info.session_id for info in self.store.list_sessions(group_id)]
            with self._hold(group_id, sessions):
                receipt = self.lifecycle.delete_group(group_id)
            self.lifecycle.purge_lease_residue(group_id, sessions, group_deleted=True)
        log.info("deleted a group with %d sessions", len(sessions))
        return self._cleared(group_id, receipt)

    # -- lifecycle: summaries, deletion, export and import, model change ------------------------------

    def generate_summaries(
        self,
        group_id: str,
        *,
        days_back: float,
        max_memories_per_summary: int,
        session_id: str | None = None,
        reference_time: datetime | None = None,
    ) -> list[Episode]:
        """Summaries of the episodes of the last ``days_back`` days (before ``reference_time``, default
        now) not yet summarised, at most ``max_memories_per_summary`` episodes each; the sources are
        marked ``summarised_by`` in the same all-or-nothing operation and never deleted.
        ``session_id`` None = group-wide summaries (kept in ``GROUP_SUMMARY_SESSION``)."""
        _scope_ids(group_id)
        if session_id is not None:
            _scope_ids(session_id)
            _not_reserved(session_id)
        if not (isinstance(days_back, int | float) and 0 < days_back <= MAX_SUMMARY_DAYS):
            raise InvalidInputError(f"days_back must be a number of days in (0, {MAX_SUMMARY_DAYS}]")
        end = to_utc(reference_time) if reference_time is not None else utc_now()
        start = end - timedelta(days=float(days_back))
        with self.gate.exclusive(group_id):
            sessions = [session_id] if session_id else [i.session_id for i in self.store.list_sessions(group_id)]
            with self._hold(group_id, sessions):
                self.summariser.rollback_unfinished(group_id)
                planned = self.summariser.plan(group_id, session_id, start, end, max_memories_per_summary)
                summaries = self.summariser.write(group_id, planned)
        self.searcher.forget_group(group_id)
        return summaries

    def summary_sources(self, group_id: str, summary: Episode) -> list[Episode]:
        """The episodes a summary compacts, in time order (expand further with ``episode_messages``)."""
        _scope_ids(group_id)
        found = self.searcher.load_episodes(group_id, list(summary.source_episode_ids))
        return sorted(found.values(), key=lambda e: (e.timestamp, e.uuid))

    def delete_message(self, group_id: str, session_id: str, message_id: str) -> DeletionReceipt:
        """The message (log and vectors); its episode is regenerated from the remaining messages
        with the same generator, or deleted when none remain; summaries citing it are rebuilt."""
        _scope_ids(group_id, session_id)
        with self.gate.exclusive(group_id), self._hold(group_id, [session_id]):
            receipt = self.lifecycle.delete_message(group_id, session_id, message_id)
        return self._cleared(group_id, receipt)

    def delete_episode(self, group_id: str, session_id: str, episode_id: str) -> DeletionReceipt:
        """An episode with the messages it was made of (summaries citing it are rebuilt), or a
        summary alone (its sources stay and lose their ``summarised_by`` mark)."""
        _scope_ids(group_id, session_id)
        with self.gate.exclusive(group_id), self._hold(group_id, [session_id]):
            receipt = self.lifecycle.delete_episode(group_id, session_id, episode_id)
        return self._cleared(group_id, receipt)

    def export_group(self, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
        """The group as epimem JSON Lines (format in memory.transfer); each line ends with a newline."""
        _scope_ids(group_id)
        if not self.store.group_exists(group_id) and not self.store.list_sessions(group_id):
            raise NotFoundError("group not found")
        return export_lines(self.store, group_id, include_embeddings=include_embeddings)

    def import_group(self, lines: Iterable[str], *, group_id: str | None = None) -> ImportReceipt:
        """Restore an export (into ``group_id``, default the exported group). The whole file is checked
        before anything is written; embeddings of another model are rebuilt; importing twice is a no-op."""
        if group_id is not None:
            _scope_ids(group_id)
        contents = read_export(lines)
        target = group_id or contents.group_id
        with self.gate.exclusive(target), self._hold(target, contents.session_ids):
            receipt = import_group(self.store, self.embedder, contents, group_id=target)
        self.searcher.forget_group(target)
        return receipt

    def reembed(self, group_id: str | None = None, progress: Progress | None = None) -> ReembedReport:
        """Rebuild the vectors of one group (or all) from the stored text with the configured model
        and record it; ``progress(done, total)`` is called as vectors are embedded."""
        if group_id is not None:
            _scope_ids(group_id)
        groups = (
            [group_id]
            if group_id is not None
            else sorted({str(m["group_id"]) for _, m in self.store.epimem_collections() if "group_id" in m})
        )
        with ExitStack() as stack:
            for group in groups:
                stack.enter_context(self.gate.exclusive(group))
            report = self.lifecycle.reembed(group_id, progress)
        for group in groups:
            self.searcher.forget_group(group)
        return report

    @contextmanager
    def _hold(self, group_id: str, session_ids: Iterable[str]) -> Iterator[None]:
        """The sessions' formation locks, in a fixed order (formation takes them the same way)."""
        with ExitStack() as stack:
            for session_id in sorted(set(session_ids)):
                stack.enter_context(self.ingestor.session_lock(group_id, session_id))
            yield

    def _cleared(self, group_id: str, receipt: DeletionReceipt) -> DeletionReceipt:
        self.searcher.forget_group(group_id)
        receipt.caches.append("keyword-index")
        if receipt.collections:
            receipt.caches.append("collection-handles")
        return receipt


def build_coordinator(settings: Settings, store: ChromaStore) -> Coordinator:
    """Leases in the shared Chroma when several servers may write the same sessions."""
    use_lease = settings.coordination == "lease" or (settings.coordination == "auto" and bool(settings.chroma_host))
    if not use_lease:
        return LocalCoordinator()
    return LeaseCoordinator(store, node_id=settings.node_id, ttl_s=settings.lease_ttl_s, wait_s=settings.lease_wait_s)


def build_generator(settings: Settings) -> EpisodeGenerator:
    """Offline unless an LLM endpoint or key is configured; then the LLM, with offline fallback."""
    if not settings.llm_configured:
        return OfflineEpisodeGenerator()
    return LLMEpisodeGenerator(
        client_from_settings(settings), timestamp_margin=timedelta(days=settings.llm_timestamp_margin_days)
    )


def build_segmenter(settings: Settings, policy: SegmentationPolicy, generator: EpisodeGenerator) -> Segmenter:
    """The LLM segmenter (sharing the generator's client and its concurrency limit) when an LLM
    generator is in use and LLM segmentation is on; the heuristic segmenter otherwise."""
    if settings.llm_segmentation and isinstance(generator, LLMEpisodeGenerator):
        return LLMSegmenter(generator.client, policy=policy, window=settings.llm_segmenter_window)
    return HeuristicSegmenter(policy)


def as_messages(items: Sequence[MessageInput]) -> list[Message]:
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in items]
