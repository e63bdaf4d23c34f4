"""The in-process Python facade, and the composition root that builds it from settings.

from api.facade import Epimem
memory = Epimem.from_settings(data_dir="./data")
memory.add_messages("team", "chat-1", [{"id": "1", "content": "...", "producer_id": "ana"}])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from memory.embedding import SentenceTransformerEmbedder
from memory.errors import NotFoundError
from memory.generation import EpisodeGenerator, GeneratorStats, OfflineEpisodeGenerator
from memory.importers import LocomoSample
from memory.ingestion import AddReceipt, Ingestor
from memory.models import (
    BoundaryReason,
    Episode,
    GroupConfiguration,
    Message,
    MessageState,
    SessionInfo,
    check_scope_id,
)
from memory.segmentation import SegmentationPolicy
from memory.settings import Settings
from memory.store import ChromaStore, DeletionReceipt, episode_from_record, open_client
from memory.worker import FormationWorker
from retrieval.context import ContextBuilder
from retrieval.search import Searcher
from retrieval.timeline import timeline as read_timeline
from retrieval.types import ContextQuery, ContextResult, Direction, Scope, SearchHit, SearchQuery, TimelinePage

log = logging.getLogger("epimem")

MessageInput = Message | Mapping[str, Any]


def _scope_ids(*ids: str) -> None:
    for value in ids:
        check_scope_id(value)


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
    ) -> None:
        self.settings = settings
        self.generator = generator
        self.store = store
        self.embedder = embedder
        policy = SegmentationPolicy(
            min_messages=settings.episode_min_messages,
            max_messages=settings.episode_max_messages,
            time_gap=timedelta(minutes=settings.episode_time_gap_minutes),
            topic_shift_threshold=settings.topic_shift_threshold,
            topic_window=settings.topic_window,
        )
        self.ingestor = Ingestor(
            store=store,
            embedder=embedder,
            generator=generator,
            policy=policy,
            auto_flush_pending=settings.auto_flush_pending,
        )
        self.searcher = Searcher(store=store, embedder=embedder)
        self.context_builder = ContextBuilder(searcher=self.searcher, count_tokens=embedder.count_tokens)
        self.worker = FormationWorker(self.ingestor) if background else None

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
        embedder = embedder or SentenceTransformerEmbedder(
            model=settings.embedding_model,
            device=settings.embedding_device,
            backend=settings.embedding_backend,
            batch_size=settings.embedding_batch_size,
            cache_size=settings.embedding_cache_size,
        )
        client = open_client(
            data_dir=settings.data_dir,
            host=settings.chroma_host,
            port=settings.chroma_port,
            ssl=settings.chroma_ssl,
            cache_bytes=settings.chroma_cache_bytes,
        )
        store = ChromaStore(client=client, model_id=embedder.model_id)
        generator = build_generator(settings)
        return cls(settings=settings, store=store, embedder=embedder, generator=generator, background=background)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    # -- write ---------------------------------------------------------------------------------

    def add_messages(self, group_id: str, session_id: str, messages: Iterable[MessageInput]) -> AddReceipt:
        """Store messages durably (idempotent by id); episodes form in the background once enough
        messages are pending, or on ``flush``."""
        _scope_ids(group_id, session_id)
        parsed = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
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
            self.ingestor.add_messages(group_id, session_id, messages)
        return self.ingestor.form([(group_id, s) for s in sample.sessions], close_tail=True)

    def generator_stats(self) -> GeneratorStats:
        return self.generator.stats()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self.worker.wait_idle(timeout) if self.worker is not None else True

    def recover(self) -> list[Episode]:
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
        _scope_ids(group_id, session_id)
        with self.ingestor.session_lock(group_id, session_id):
            receipt = self.store.delete_session(group_id, session_id)
        self.searcher.forget_group(group_id)
        return receipt

    def delete_group(self, group_id: str) -> DeletionReceipt:
        _scope_ids(group_id)
        sessions = [info.session_id for info in self.store.list_sessions(group_id)]
        receipt = self.store.delete_group(group_id)
        self.searcher.forget_group(group_id)
        log.info("deleted a group with %d sessions", len(sessions))
        return receipt


def build_generator(settings: Settings) -> EpisodeGenerator:
    """Offline unless an LLM endpoint or key is configured."""
    return OfflineEpisodeGenerator()


def as_messages(items: Sequence[MessageInput]) -> list[Message]:
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in items]
