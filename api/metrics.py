"""Prometheus metrics, one registry per app (several apps in one process never share counters).

Request counts and latencies are labelled by route template (``/v1/groups/{group_id}/search``),
never by concrete ids, so group ids do not leak into metrics and cardinality stays bounded.
Service figures (episodes, LLM calls and tokens, fallbacks, open partitions, ingest stage timings)
are read from the service at scrape time by a collector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api.facade import Epimem


class ServiceCollector(Collector):
    def __init__(self, service: Callable[[], Epimem | None]) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service()
        if service is None:
            return
        timings = service.ingestor.timings
        stats = service.generator_stats()
        yield CounterMetricFamily(
            "epimem_episodes_created", "Episodes written to the store.", value=timings.episodes_created
        )
        generated = CounterMetricFamily(
            "epimem_generator_episodes", "Episodes produced by the generator.", labels=["model"]
        )
        generated.add_metric([stats.model], stats.episodes)
        yield generated
        for name, doc, value in (
            ("epimem_llm_calls", "LLM calls made for episode generation.", stats.calls),
            ("epimem_llm_retries", "LLM calls retried.", stats.retries),
            ("epimem_episode_fallbacks", "Episodes built by the fallback path after an LLM failure.", stats.fallbacks),
            ("epimem_llm_latency_seconds", "Total seconds spent waiting for the LLM.", stats.latency_seconds),
        ):
            family = CounterMetricFamily(name, doc, labels=["model"])
            family.add_metric([stats.model], value)
            yield family
        tokens = CounterMetricFamily("epimem_llm_tokens", "LLM tokens used.", labels=["model", "kind"])
        tokens.add_metric([stats.model, "prompt"], stats.prompt_tokens)
        tokens.add_metric([stats.model, "completion"], stats.completion_tokens)
        yield tokens
        stages = CounterMetricFamily(
            "epimem_ingest_stage_seconds", "Cumulative seconds per ingest stage.", labels=["stage"]
        )
        for stage, seconds in sorted(dict(timings.seconds).items()):
            stages.add_metric([stage], seconds)
        yield stages
        yield GaugeMetricFamily(
            "epimem_partitions_open", "Chroma collections held open.", value=service.store.open_collections
        )
        if service.worker is not None:
            yield GaugeMetricFamily(
                "epimem_formation_queue", "Sessions waiting for episode formation.", value=len(service.worker.pending())
            )
            yield CounterMetricFamily(
                "epimem_formation_failures", "Background formations that failed.", value=service.worker.failures
            )


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
