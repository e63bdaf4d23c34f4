"""The composition root: the only place that reads ``Settings`` and builds epimem from them — the
store, the embedder, the LLM client, the episode generator and segmenter, the coordinator, the
ingestor and its worker, the lifecycle parts, the memory service, and the read path over it.
Everything below takes plain keyword arguments."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from api.settings import Settings, load_settings
from memory.background import set_background_nice
from memory.embedding.embedder import SentenceTransformerEmbedder, ServiceEmbedder
from memory.embedding.lazy import LazyEmbedder
from memory.engine.folder_lock import release_folder
from memory.episodes.generation import OfflineEpisodeGenerator, ReportingGenerator
from memory.episodes.segmentation import HeuristicSegmenter, SegmentationPolicy, Segmenter
from memory.events import SessionOrder
from memory.ingest.coordination import Coordinator, LeaseCoordinator, LocalCoordinator, default_node_id
from memory.ingest.ingestor import Ingestor
from memory.ingest.worker import FormationWorker
from memory.lifecycle.deletion import Deleter, Rewrites
from memory.lifecycle.editing import Editor
from memory.lifecycle.importing import Importer
from memory.lifecycle.reembed import Reembedder
from memory.lifecycle.reform import Reformer
from memory.lifecycle.retention import Retention
from memory.lifecycle.revisions import RevisionLog
from memory.lifecycle.summaries import Summariser
from memory.lifecycle.sweeper import RetentionSweeper
from memory.lifecycle.transfer import Exporter
from memory.llm.stats import LLMCallStats, Reporting
from memory.readmodel.model import ReadModel
from memory.service import MemoryService
from memory.store.bounded import CollectionSlots
from memory.store.connection import open_connection
from memory.store.factory import Store, open_store
from memory.webhooks.hub import Webhooks
from retrieval.context import ContextBuilder
from retrieval.overview import Overview
from retrieval.search import Searcher

if TYPE_CHECKING:
    from memory.llm.client import LLMClient


def build_service(
    settings: Settings | None = None,
    *,
    background: bool = True,
    embedder: ServiceEmbedder | None = None,
    generator: ReportingGenerator | None = None,
    **overrides: Any,
) -> ServiceParts:
    """The parts of the service the settings describe (``Epimem.from_settings`` wraps them in the facade).
    ``embedder`` lets several services in one process share one
    loaded model (tests, notebooks); ``generator`` replaces the configured episode generator (tests)."""
    settings = load_settings(settings, **overrides)
    set_background_nice(settings.background_nice)  # process-wide, like the scheduler it tells
    closers = ExitStack()
    try:
        return _build(settings, closers, background=background, embedder=embedder, generator=generator)
    except BaseException:
        closers.close()  # e.g. the folder lock taken before a later part failed
        raise


def _build(
    settings: Settings,
    closers: ExitStack,
    *,
    background: bool,
    embedder: ServiceEmbedder | None,
    generator: ReportingGenerator | None,
) -> ServiceParts:
    embedder = embedder or lazy_embedder(settings)
    store = open_store(build_connection(settings, closers), model_id=embedder.model_id)
    read_model = ReadModel(
        store, persist=True, max_bytes=settings.read_cache_mb * 2**20, max_groups=settings.read_cache_groups
    )
    closers.callback(read_model.close)  # before the folder lock goes: snapshots kept for the next start
    client = llm_client(settings, closers)
    if generator is None:
        generator = build_generator(settings, client)
    policy = segmentation_policy(settings)
    webhooks = build_webhooks(settings, store, background=background)
    closers.callback(webhooks.close)
    events = SessionOrder(webhooks.outbox)  # every change, each session's in order, to the webhook outbox
    segmenter, segmenter_stats = build_segmenter(settings, policy, client)
    ingestor = Ingestor(
        log=store.log,
        vectors=store.vectors,
        embedder=embedder,
        generator=generator,
        segmenter=segmenter,
        policy=policy,
        auto_flush_pending=settings.auto_flush_pending,
        coordinator=build_coordinator(settings, store, closers),
        generation_concurrency=settings.llm_concurrency if client is not None else 1,
        idle=timedelta(seconds=settings.idle_seconds),
        events=events,
    )
    summariser = Summariser(
        log=store.log, vectors=store.vectors, embedder=embedder, generator=generator if client is not None else None
    )
    # One reformer for deletes and corrections: an episode made again from changed sources, with its history.
    reformer = Reformer(vectors=store.vectors, embedder=embedder, generator=generator, revisions=RevisionLog(store.log))
    llm_components: dict[str, Reporting[LLMCallStats]] = {"generator": generator}  # offline: all zero
    if segmenter_stats is not None:
        llm_components["segmenter"] = segmenter_stats
    rewrites = Rewrites(
        log=store.log, vectors=store.vectors, admin=store.admin, summariser=summariser, reformer=reformer
    )
    deleter = Deleter(rewrites)
    memory = MemoryService(
        store=store,
        generator=generator,
        ingestor=ingestor,
        summariser=summariser,
        deleter=deleter,
        editor=Editor(rewrites, embedder=embedder),
        reembedder=Reembedder(log=store.log, admin=store.admin, embedder=embedder),
        exporter=Exporter(log=store.log, vectors=store.vectors, model_id=store.model_id),
        importer=Importer(
            log=store.log, vectors=store.vectors, embedder=embedder, model_id=store.model_id, intake=ingestor.intake
        ),
        retention=Retention(
            log=store.log, vectors=store.vectors, admin=store.admin, deleter=deleter, summariser=summariser
        ),
        worker=FormationWorker(ingestor, scan_interval_s=scan_interval(settings), idle_s=settings.idle_seconds)
        if background
        else None,
        llm_components=llm_components,
        read_cache=read_model.stats,
        closers=[closers.close],
        events=events,
    )
    if background and settings.retention_sweep_interval_s > 0:
        sweeper = RetentionSweeper(
            groups=memory.groups_with_retention,
            sweep=memory.sweep_retention,
            interval_s=settings.retention_sweep_interval_s,
        )
        closers.callback(sweeper.close)
    return read_side(settings, memory, read_model, embedder, webhooks)


@dataclass(frozen=True)
class ServiceParts:
    """What the facade is made of: the settings, the memory service and the read path over it."""

    settings: Settings
    memory: MemoryService
    embedder: ServiceEmbedder
    read_model: ReadModel
    searcher: Searcher
    context_builder: ContextBuilder
    overview: Overview
    webhooks: Webhooks


def read_side(
    settings: Settings, memory: MemoryService, read_model: ReadModel, embedder: ServiceEmbedder, webhooks: Webhooks
) -> ServiceParts:
    """The read path over the read model, which the memory service tells of every change it announces
    (deletion receipts name it "keyword-index": the group's kept copy and keyword index are patched or dropped)."""
    store = memory.store
    memory.subscribe("keyword-index", read_model.scrub)
    wordpieces = embedder.count_tokens if settings.context_token_count == "wordpieces" else None
    return ServiceParts(
        settings=settings,
        memory=memory,
        embedder=embedder,
        read_model=read_model,
        searcher=Searcher(read_model=read_model, embedder=embedder),
        context_builder=ContextBuilder(read_model=read_model, embedder=embedder, count_wordpieces=wordpieces),
        overview=Overview(log=store.log, vectors=store.vectors),
        webhooks=webhooks,
    )


def lazy_embedder(settings: Settings) -> LazyEmbedder:
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


def build_connection(settings: Settings, closers: ExitStack) -> Any:
    """A Chroma deployment's connection, or the process's embedded Chroma on the data folder (its folder
    lock is released when the service closes)."""
    connection = open_connection(
        data_dir=settings.data_dir,
        host=settings.chroma_host,
        recycle_after=settings.chroma_recycle_after,
        max_open=settings.chroma_max_open,
        deployment=settings.chroma_deployment(),
        slots=CollectionSlots(reads=settings.chroma_concurrent_reads, writes=settings.chroma_concurrent_writes),
        listing_page=settings.chroma_listing_page,
    )
    if not settings.chroma_host:
        closers.callback(release_folder, settings.data_dir)
    return connection


def llm_client(settings: Settings, closers: ExitStack) -> LLMClient | None:
    """The LLM client when an LLM endpoint or key is configured (closed with the service)."""
    if not settings.llm_configured:
        return None
    from memory.llm.client import LLMClient  # the openai package: imported only when an LLM is configured

    client = LLMClient(
        model=settings.llm_model,
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        concurrency=settings.llm_concurrency,
        backoff_s=settings.llm_retry_backoff_s,
        max_tokens=settings.llm_max_tokens,
    )
    closers.callback(client.close)
    return client


def build_generator(settings: Settings, client: LLMClient | None) -> ReportingGenerator:
    """Offline without an LLM; otherwise the LLM, with offline fallback."""
    if client is None:
        return OfflineEpisodeGenerator()
    from memory.episodes.llm_generator import LLMEpisodeGenerator

    return LLMEpisodeGenerator(client, timestamp_margin=timedelta(days=settings.llm_timestamp_margin_days))


def segmentation_policy(settings: Settings) -> SegmentationPolicy:
    """The policy the ``EPIMEM_EPISODE_*`` / ``EPIMEM_SEGMENTATION_*`` settings describe."""
    return SegmentationPolicy(
        min_messages=settings.episode_min_messages,
        max_messages=settings.episode_max_messages,
        time_gap=timedelta(minutes=settings.episode_time_gap_minutes),
        topic_shift_threshold=settings.topic_shift_threshold,
        topic_window=settings.topic_window,
        method=settings.segmentation_method,
        target_messages=settings.episode_target_messages,
    )


def build_segmenter(
    settings: Settings, policy: SegmentationPolicy, client: LLMClient | None
) -> tuple[Segmenter, Reporting[LLMCallStats] | None]:
    """The LLM segmenter (sharing the generator's client and its concurrency limit, reporting its LLM
    calls) when an LLM is configured and LLM segmentation is on; the heuristic segmenter otherwise."""
    if client is not None and settings.llm_segmentation:
        from memory.episodes.llm_segmenter import LLMSegmenter

        segmenter = LLMSegmenter(client, policy=policy, window=settings.llm_segmenter_window)
        return segmenter, segmenter
    return HeuristicSegmenter(policy), None


def build_coordinator(settings: Settings, store: Store, closers: ExitStack) -> Coordinator:
    """Leases in the shared Chroma when several servers may write the same sessions."""
    use_lease = settings.coordination == "lease" or (settings.coordination == "auto" and bool(settings.chroma_host))
    if not use_lease:
        return LocalCoordinator()
    coordinator = LeaseCoordinator(
        store.log, node_id=settings.node_id, ttl_s=settings.lease_ttl_s, wait_s=settings.lease_wait_s
    )
    closers.callback(coordinator.close)
    return coordinator


def scan_interval(settings: Settings) -> float:
    """Background scans for unfinished sessions: every minute with a Chroma server, off embedded."""
    if settings.formation_scan_interval_s is not None:
        return settings.formation_scan_interval_s
    return 60.0 if settings.chroma_host else 0.0


def build_webhooks(settings: Settings, store: Store, *, background: bool) -> Webhooks:
    """Subscriptions and the outbox; the delivery worker only on a server that delivers (``background``)."""
    return Webhooks(
        store.webhooks,
        allow_hosts=settings.webhook_hosts,
        node_id=settings.node_id or default_node_id(),
        poll_s=settings.webhook_poll_s if background else 0.0,
        timeout_s=settings.webhook_timeout_s,
        max_age_s=settings.webhook_max_age_hours * 3600,
        lease_ttl_s=settings.lease_ttl_s,
    )
