"""Prometheus metrics, one registry per app (several apps in one process never share counters).

Request counts and latencies are labelled by route template (``/v1/groups/{group_id}/search``),
never by concrete ids, so group ids do not leak into metrics and cardinality stays bounded.
Service figures (episodes, LLM calls and tokens of the generator and the segmenter, fallbacks, open
partitions, the read cache, ingest stage timings) are read from one ``ServiceStats`` snapshot at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api.facade import Epimem
from memory.llm.stats import LLMCallStats
from memory.readmodel.model import CacheStats


class ServiceCollector(Collector):
    def __init__(self, service: Callable[[], Epimem | None]) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service()
        if service is None:
            return
        stats = service.stats()
        generator = stats.generator
        yield CounterMetricFamily(
            "epimem_episodes_created", "Episodes written to the store.", value=stats.ingest.episodes_created
        )
        generated = CounterMetricFamily(
            "epimem_generator_episodes", "Episodes produced by the generator.", labels=["model"]
        )
        generated.add_metric([generator.model], generator.episodes)
        yield generated
        fallbacks = CounterMetricFamily(
            "epimem_episode_fallbacks", "Episodes built by the fallback path after an LLM failure.", labels=["model"]
        )
        fallbacks.add_metric([generator.model], generator.fallbacks)
        yield fallbacks
        yield from _llm_families(stats.llm)
        stages = CounterMetricFamily(
            "epimem_ingest_stage_seconds", "Cumulative seconds per ingest stage.", labels=["stage"]
        )
        for stage, seconds in sorted(stats.ingest.seconds.items()):
            stages.add_metric([stage], seconds)
        yield stages
        yield GaugeMetricFamily("epimem_partitions_open", "Chroma collections held open.", value=stats.open_collections)
        yield from _read_cache_families(stats.read_cache)
        if stats.formation_queue is not None:
            yield GaugeMetricFamily(
                "epimem_formation_queue", "Sessions waiting for episode formation.", value=stats.formation_queue
            )
            yield CounterMetricFamily(
                "epimem_formation_failures", "Background formations that failed.", value=stats.formation_failures
            )


def _read_cache_families(cache: CacheStats | None) -> Iterator[Metric]:
    """This process's read cache against its bounds (EPIMEM_READ_CACHE_MB, EPIMEM_READ_CACHE_GROUPS)."""
    if cache is None:
        return
    gauges = {
        "bytes": ("Bytes the read snapshots of this process hold (estimated).", cache.bytes),
        "max_bytes": ("The read cache's bound in bytes (EPIMEM_READ_CACHE_MB).", cache.max_bytes),
        "groups": ("Groups whose read snapshots this process holds.", cache.groups),
        "max_groups": ("The read cache's bound in groups (EPIMEM_READ_CACHE_GROUPS).", cache.max_groups),
    }
    for name, (help_text, value) in gauges.items():
        yield GaugeMetricFamily(f"epimem_read_cache_{name}", help_text, value=value)
    yield CounterMetricFamily(
        "epimem_read_cache_evictions", "Group snapshots dropped to stay within the bounds.", value=cache.evictions
    )


def _llm_families(components: dict[str, LLMCallStats]) -> Iterator[Metric]:
    """The LLM counters of every LLM-backed component (the episode generator, the segmenter)."""
    labels = ["component", "model"]
    families = {
        "calls": CounterMetricFamily("epimem_llm_calls", "LLM calls made.", labels=labels),
        "retries": CounterMetricFamily("epimem_llm_retries", "LLM calls retried.", labels=labels),
        "fallbacks": CounterMetricFamily(
            "epimem_llm_fallbacks", "Work done without the LLM because it failed.", labels=labels
        ),
        "latency_seconds": CounterMetricFamily(
            "epimem_llm_latency_seconds", "Total seconds spent waiting for the LLM.", labels=labels
        ),
    }
    tokens = CounterMetricFamily("epimem_llm_tokens", "LLM tokens used.", labels=[*labels, "kind"])
    for component, counters in sorted(components.items()):
        for field, family in families.items():
            family.add_metric([component, counters.model], getattr(counters, field))
        tokens.add_metric([component, counters.model, "prompt"], counters.prompt_tokens)
        tokens.add_metric([component, counters.model, "completion"], counters.completion_tokens)
    yield from families.values()
    yield tokens


class Metrics:
    def __init__(self, service: Callable[[], Epimem | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "epimem_http_requests",
            "HTTP requests by route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "epimem_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.registry.register(ServiceCollector(service))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)
