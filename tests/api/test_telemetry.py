"""OpenTelemetry: the span tree of an ingest and of a context call over real HTTP (uvicorn), read
from the SDK's in-memory exporter; no ids, keys or text in attributes; off by default."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import messages
from helpers.docs_blocks import blocks
from helpers.servers import AppServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from api.facade import Epimem
from api.http.telemetry import scrub_url, setup_tracing, tracing_requested
from api.server import create_app
from api.settings import Settings
from memory import tracing
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

GROUP = "secret-group-7f3a"
TEXT = "Caroline adopted a golden retriever called Rex"


@pytest.fixture(params=[False], ids=["default"])
def traced(
    tmp_path: Path, model_embedder: SentenceTransformerEmbedder, request: pytest.FixtureRequest
) -> Iterator[tuple[str, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = Settings(data_dir=tmp_path / "data", trace_query_text=request.param)
    service = Epimem.from_settings(settings, background=False, embedder=model_embedder)
    app = create_app(service)
    assert setup_tracing(app, provider)
    server = AppServer(app).start()
    try:
        yield server.url, exporter
    finally:
        server.stop()
        tracing.disable()
        service.close()


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def descendants(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    found = children(spans, parent)
    return found + [d for child in found for d in descendants(spans, child)]


def request_span(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [s for s in spans if s.name == name and s.parent is None]
    assert len(matching) == 1, [s.name for s in spans if s.parent is None]
    return matching[0]


def names(spans: list[ReadableSpan]) -> set[str]:
    return {s.name for s in spans}


def test_span_trees_of_an_ingest_and_a_context_call(traced: tuple[str, InMemorySpanExporter]) -> None:
    url, exporter = traced
    batch = messages(3, text=f"{TEXT} ({{i}}).", speakers=("Caroline",))
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.post(f"/v1/groups/{GROUP}/sessions/s1/messages", json={"messages": batch}).status_code == 200
        assert http.post(f"/v1/groups/{GROUP}/sessions/s1/flush").status_code == 200
        context = http.post(f"/v1/groups/{GROUP}/context", json={"query": "Who has a dog?", "token_budget": 300})
        assert context.status_code == 200 and "Rex" in context.json()["text"]
        assert http.get("/healthz").status_code == 200
        assert http.get("/metrics").status_code == 200
    spans = list(exporter.get_finished_spans())

    add = request_span(spans, "POST /v1/groups/{group_id}/sessions/{session_id}/messages")
    (create,) = [s for s in children(spans, add) if s.name == "create_memory"]  # the GenAI memory operation
    (store,) = [s for s in children(spans, create) if s.name == "epimem.ingest.store_messages"]
    # The add embeds its three messages (recallable at once); formation reuses their vectors.
    (added,) = [s for s in children(spans, store) if s.name == "epimem.ingest.embedding"]
    embed = [s for s in children(spans, added) if s.name == "epimem.embed"]
    assert embed and embed[0].attributes["epimem.batch_size"] == 3
    flush = request_span(spans, "POST /v1/groups/{group_id}/sessions/{session_id}/flush")
    stages = children(spans, flush)
    assert {"epimem.ingest.embedding", "epimem.ingest.segmentation", "epimem.ingest.generation"} <= names(stages)
    assert "epimem.ingest.storage" in names(stages)
    embedding = next(s for s in stages if s.name == "epimem.ingest.embedding")
    embed = [s for s in children(spans, embedding) if s.name == "epimem.embed"]
    assert embed and embed[0].attributes["epimem.batch_size"] == 1  # the episode only
    assert any(s.name.startswith("epimem.store.") for s in descendants(spans, flush))

    ctx = request_span(spans, "POST /v1/groups/{group_id}/context")
    (searched,) = [s for s in children(spans, ctx) if s.name == "search_memory"]
    (pack,) = [s for s in children(spans, searched) if s.name == "epimem.context.pack"]
    assert pack.attributes["epimem.budget"] == 300
    assert pack.attributes["epimem.pieces"] == 1
    assert 0 < pack.attributes["epimem.tokens"] <= 300
    assert pack.attributes["epimem.group_hash"] == tracing.group_hash(GROUP)
    below = names(descendants(spans, pack))
    # the context scores the group's messages from its read snapshot: no candidate query
    assert "epimem.score.messages" in below and any(n.startswith("epimem.store.") for n in below)

    assert not [s for s in spans if "healthz" in s.name or "metrics" in s.name]
    for span in spans:  # no raw group id, no message text in any attribute
        for value in (span.attributes or {}).values():
            assert GROUP not in str(value) and "retriever" not in str(value), (span.name, value)


def test_off_without_endpoint_and_no_spans_then(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing_requested()
    assert tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"})
    app = create_app(settings=Settings(data_dir=tmp_path))
    assert not hasattr(app.state, "tracer_provider") and not tracing.enabled()
    with tracing.span("epimem.x", n=1) as current:
        current.set(n=2)  # the no-op handle


def test_otlp_from_the_documented_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The variables of the docs' example (``OTEL_… epimem serve``) switch OTLP tracing on."""
    (line,) = blocks(__file__, "bash")
    *assignments, command, verb = line.split()
    assert (command, verb) == ("epimem", "serve")
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        monkeypatch.setenv(name, value)
    app = create_app(settings=Settings(data_dir=tmp_path))
    try:
        provider: Any = app.state.tracer_provider
        assert provider.resource.attributes["service.name"] == "epimem-prod"
        assert tracing.enabled()
    finally:
        tracing.disable()
        provider.shutdown()


def test_scrub_url() -> None:
    assert scrub_url("/v1/groups/team-a/sessions/s%201/episodes/e1?expand=messages") == (
        "/v1/groups/{id}/sessions/{id}/episodes/{id}"
    )
    assert scrub_url("http://h:1/v1/groups/x/search") == "http://h:1/v1/groups/{id}/search"


def test_without_the_extra_the_app_is_unchanged(tmp_path: Path) -> None:
    """OTEL_* set but the extra's own packages (OTLP/HTTP exporter, FastAPI instrumentation) missing:
    one warning, no tracing, the app works. (The API and SDK come with FastAPI and chromadb.)"""
    code = (
        "import sys\n"
        "sys.modules[sys.argv[2]] = None\n"
        "from api.server import create_app\n"
        "from memory import tracing\n"
        "from api.settings import Settings\n"
        "app = create_app(settings=Settings(data_dir=sys.argv[1]))\n"
        "print(hasattr(app.state, 'tracer_provider'), tracing.enabled())\n"
    )
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "COLUMNS": "200"}  # one line
    for missing in ("opentelemetry.exporter.otlp.proto.http", "opentelemetry.instrumentation.fastapi"):
        args = [sys.executable, "-c", code, str(tmp_path / missing), missing]
        run = subprocess.run(args, capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.strip().splitlines()[-1] == "False False"
        assert "epimem-server[otel] is not installed" in run.stderr


def memory_spans(spans: list[ReadableSpan]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        attributes = dict(span.attributes or {})
        if "gen_ai.operation.name" in attributes:
            assert span.name == attributes["gen_ai.operation.name"]  # the span is named by its operation
            found.setdefault(span.name, []).append(attributes)
    return found


@pytest.mark.parametrize("traced", [False, True], ids=["query-text-off", "query-text-on"], indirect=True)
def test_operations_on_memory_follow_the_genai_memory_conventions(
    traced: tuple[str, InMemorySpanExporter], request: pytest.FixtureRequest
) -> None:
    url, exporter = traced
    opted_in = "query-text-on" in request.node.callspec.id
    store = tracing.group_hash(GROUP)
    batch = messages(3, text=f"{TEXT} ({{i}}).", speakers=("Caroline",))
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.post(f"/v1/groups/{GROUP}/sessions/s1/messages", json={"messages": batch}).status_code == 200
        episode = http.post(f"/v1/groups/{GROUP}/sessions/s1/flush").json()["episodes"][0]["uuid"]
        assert http.post(f"/v1/groups/{GROUP}/search", json={"query": "Who has a dog?", "k": 2}).status_code == 200
        fixed = http.patch(f"/v1/groups/{GROUP}/sessions/s1/episodes/{episode}", json={"title": "Rex the dog"})
        assert fixed.status_code == 200
        message_id = batch[0]["id"]
        assert http.delete(f"/v1/groups/{GROUP}/sessions/s1/messages/{message_id}").status_code == 200
        assert http.delete(f"/v1/groups/{GROUP}/sessions/s1/episodes/no-such-episode").status_code == 404
        assert http.delete(f"/v1/groups/{GROUP}").status_code == 200
    found = memory_spans(list(exporter.get_finished_spans()))
    for operations in found.values():
        for attributes in operations:
            assert attributes["gen_ai.provider.name"] == "epimem" and attributes["gen_ai.memory.store.id"] == store
    (created,) = found["create_memory"]
    assert created["gen_ai.memory.record.count"] == 3
    (searched,) = found["search_memory"]
    assert searched["gen_ai.memory.record.count"] >= 1
    assert searched.get("gen_ai.memory.query.text") == ("Who has a dog?" if opted_in else None)
    (updated,) = found["update_memory"]
    assert updated["gen_ai.memory.record.id"] == episode
    deleted, missing = found["delete_memory"]
    assert deleted["gen_ai.memory.record.id"] == f"message-{tracing.group_hash(message_id)}"
    assert deleted["gen_ai.memory.record.count"] >= 1 and message_id not in str(deleted)
    assert missing["gen_ai.memory.record.id"] == "no-such-episode" and missing["error.type"] == "not_found"
    (dropped,) = found["delete_memory_store"]
    assert "gen_ai.memory.record.id" not in dropped  # the whole store
