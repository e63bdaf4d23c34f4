"""OpenTelemetry traces (``pip install 'epimem-server[otel]'``), configured by the standard ``OTEL_*``
variables: set ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and every
HTTP request becomes a trace (OTLP over HTTP) with child spans for store calls, embedding,
segmentation, episode generation, search and context packing. ``OTEL_SERVICE_NAME`` names the
service (default ``epimem``); ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn it off.
Without the extra or without an endpoint nothing is installed and nothing changes.

Health, readiness and metrics requests are not traced. Span attributes carry sizes and costs,
never message text or keys; ids in URL paths (groups, sessions, episodes, messages) and query
strings are replaced by placeholders before any exporter sees them. The operations on memory are spans
of OpenTelemetry's GenAI memory conventions (``memory.tracing.memory_operation``); the text of a search
is in them only with ``EPIMEM_TRACE_QUERY_TEXT=true``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI

from memory import tracing

log = logging.getLogger("epimem.telemetry")

EXCLUDED_URLS = "/healthz,/readyz,/metrics"
_ID_SEGMENT = re.compile(r"/(groups|sessions|episodes|messages)/[^/?#]+")
_URL_KEYS = ("http.target", "http.url", "url.path", "url.full")
_QUERY_KEYS = ("url.query",)


def tracing_requested(env: Mapping[str, str] = os.environ) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def scrub_url(value: str) -> str:
    """``/v1/groups/team-a/sessions/s1/search?x=1`` → ``/v1/groups/{id}/sessions/{id}/search``."""
    return _ID_SEGMENT.sub(lambda m: f"/{m.group(1)}/{{id}}", value.split("?", 1)[0])


def scrub_ids(span: Any, _scope: Any = None) -> None:
    """Replace ids in the URL attributes of the HTTP server span (the instrumentation's request
    hook, called once they are set), so no exporter ever receives a raw group id."""
    attributes = span.attributes or {}
    for key in _URL_KEYS:
        value = attributes.get(key)
        if isinstance(value, str):
            span.set_attribute(key, scrub_url(value))
    for key in _QUERY_KEYS:
        if key in attributes:
            span.set_attribute(key, "")


def _otlp_provider() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME", "epimem")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))  # + OTEL_RESOURCE_ATTRIBUTES
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint, headers from OTEL_*
    return provider


def setup_tracing(app: FastAPI, tracer_provider: Any = None) -> bool:
    """Trace ``app`` into ``tracer_provider``, or into an OTLP exporter when the ``OTEL_*``
    variables ask for one. Returns whether tracing is on."""
    if tracer_provider is None and not tracing_requested():
        return False
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        tracer_provider = tracer_provider if tracer_provider is not None else _otlp_provider()
    except ImportError:
        log.warning("OTEL_* asks for traces but epimem-server[otel] is not installed: no traces")
        return False
    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=tracer_provider,
        excluded_urls=EXCLUDED_URLS,
        exclude_spans=["receive", "send"],
        server_request_hook=scrub_ids,
    )
    settings = getattr(app.state, "settings", None)
    tracing.enable(tracer_provider, query_text=bool(getattr(settings, "trace_query_text", False)))
    app.state.tracer_provider = tracer_provider
    return True
