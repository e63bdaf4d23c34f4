"""The HTTP API through the ASGI test client (lifespan included), on both Chroma backends where it
touches storage. Real uvicorn is exercised in test_client.py."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import builders

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.receipts import DeletionReceipt

messages = partial(
    builders.messages,
    text="Turn {i}: we talked about {topic}.",
    topics=("hiking at Lake Tahoe with the dog Rex", "painting a sunset for the art show"),
)


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]


def recovered(test_client: TestClient) -> TestClient:
    """Wait for the startup recovery: on a shared Chroma server it may otherwise form (as an idle tail)
    a session a test is still writing to."""
    deadline = time.monotonic() + 60
    while test_client.get("/readyz").json().get("recovering") and time.monotonic() < deadline:
        time.sleep(0.05)
    return test_client


@pytest.fixture
def client(service: Epimem) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as test_client:
        yield recovered(test_client)


@pytest.fixture(scope="module")
def local_app(
    tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[Callable[..., TestClient]]:
    """For tests of the HTTP surface itself (limits, errors): one embedded store, settings per app."""
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path_factory.mktemp("api-local")), background=False, embedder=embedder
    )
    clients: list[TestClient] = []

    def make(**overrides: object) -> TestClient:
        settings = Settings(**{**service.settings.model_dump(), **overrides})
        test_client = TestClient(create_app(service, settings))
        test_client.__enter__()
        clients.append(test_client)
        return recovered(test_client)

    yield make
    for test_client in clients:
        test_client.__exit__(None, None, None)
    service.close()


# -- the write and read path ------------------------------------------------------------------------


def test_messages_flush_episodes_and_recall(client: TestClient, service: Epimem, group_id: str) -> None:
    base = f"/v1/groups/{group_id}"
    batch = messages(6)
    first = client.post(f"{base}/sessions/s1/messages", json={"messages": batch})
    assert first.status_code == 200, first.text
    assert first.json() == {"accepted": [m["id"] for m in batch], "duplicates": [], "pending": 6}
    again = client.post(f"{base}/sessions/s1/messages", json={"messages": batch[:2]})
    assert again.json()["accepted"] == [] and again.json()["duplicates"] == ["m0", "m1"]
    changed = dict(batch[0], content="something else entirely")
    conflict = assert_error(client.post(f"{base}/sessions/s1/messages", json={"messages": [changed]}), 409, "conflict")
    assert conflict["details"] == {"ids": ["m0"]}

    history = client.get(f"{base}/sessions/s1/messages", params={"limit": 4}).json()
    assert [m["id"] for m in history["messages"]] == ["m0", "m1", "m2", "m3"] and history["next_cursor"]
    rest = client.get(f"{base}/sessions/s1/messages", params={"limit": 4, "cursor": history["next_cursor"]}).json()
    assert [m["id"] for m in rest["messages"]] == ["m4", "m5"] and rest["next_cursor"] is None

    flushed = client.post(f"{base}/sessions/s1/flush")
    assert flushed.status_code == 200, flushed.text
    episodes = flushed.json()["episodes"]
    assert episodes and sorted(i for e in episodes for i in e["source_message_ids"]) == sorted(m["id"] for m in batch)
    assert client.post(f"{base}/sessions/s1/flush").json() == {"episodes": []}

    episode = episodes[0]
    plain = client.get(f"{base}/sessions/s1/episodes/{episode['uuid']}")
    assert plain.status_code == 200 and plain.json()["messages"] is None
    assert plain.json()["episode"]["uuid"] == episode["uuid"]
    expanded = client.get(f"{base}/sessions/s1/episodes/{episode['uuid']}", params={"expand": "messages"}).json()
    assert [m["id"] for m in expanded["messages"]] == episode["source_message_ids"]
    assert_error(client.get(f"{base}/sessions/s1/episodes/no-such-episode"), 404, "not_found")
    assert_error(client.get(f"{base}/sessions/s1/episodes/{episode['uuid']}?expand=everything"), 422, "invalid_input")

    hits = client.post(f"{base}/search", json={"query": "hiking with Rex", "k": 3}).json()["hits"]
    assert hits and all(h["episode"]["group_id"] == group_id for h in hits)
    assert "Rex" in hits[0]["episode"]["content"]
    assert client.post(f"/v1/groups/{group_id}-other/search", json={"query": "hiking"}).json() == {"hits": []}
    # Scores are on one 0..1 scale; min_score keeps the hits scoring at least it, in the same order.
    assert all(0 < h["score"] < 1 for h in hits) and [h["score"] for h in hits] == sorted(
        (h["score"] for h in hits), reverse=True
    )
    threshold = hits[0]["score"]
    kept = client.post(f"{base}/search", json={"query": "hiking with Rex", "k": 3, "min_score": threshold}).json()
    assert [h["episode"]["uuid"] for h in kept["hits"]] == [
        h["episode"]["uuid"] for h in hits if h["score"] >= threshold
    ]

    context = client.post(f"{base}/context", json={"query": "What did they do with Rex?", "token_budget": 200})
    assert context.status_code == 200
    body = context.json()
    assert set(body) == {"text", "citations", "tokens"} and 0 < body["tokens"] <= 200
    assert body["citations"] and body["citations"][0]["episode_id"] in {e["uuid"] for e in episodes}
    markers = [citation["marker"] for citation in body["citations"]]  # each piece opens with its citation's marker
    assert markers == [f"[{n}]" for n in range(1, len(markers) + 1)]
    assert re.findall(r"^(\[\d+\]) ", body["text"], flags=re.M) == markers

    page = client.get(f"{base}/timeline", params={"limit": 1}).json()
    seen = [e["uuid"] for e in page["episodes"]]
    while page["next_cursor"]:
        page = client.get(f"{base}/timeline", params={"limit": 1, "cursor": page["next_cursor"]}).json()
        seen += [e["uuid"] for e in page["episodes"]]
    assert sorted(seen) == sorted(e["uuid"] for e in episodes) and len(seen) == len(set(seen))
    newest_first = client.get(f"{base}/timeline", params={"order": "desc", "session_id": "s1"}).json()
    assert [e["uuid"] for e in newest_first["episodes"]] == seen[::-1]
    window = client.get(f"{base}/timeline", params={"start": "2030-01-01T00:00:00Z"}).json()
    assert window["episodes"] == []
    assert_error(client.get(f"{base}/timeline", params={"cursor": "not-a-cursor"}), 422, "invalid_input")

    metrics = client.get("/metrics").text
    assert 'epimem_http_requests_total{method="POST",route="/v1/groups/{group_id}/search",status="200"}' in metrics
    assert group_id not in metrics  # route templates only, never ids
    created = [line for line in metrics.splitlines() if line.startswith("epimem_episodes_created_total ")]
    assert created and float(created[0].split()[1]) >= len(episodes)
    assert 'epimem_ingest_stage_seconds_total{stage="embedding"}' in metrics
    assert "epimem_partitions_open " in metrics and "epimem_llm_calls_total" in metrics
    cache = {
        name: float(value)
        for name, value in (line.split() for line in metrics.splitlines() if line.startswith("epimem_read_cache_"))
    }
    bounds = service.read_model  # the group searched above holds a snapshot within them
    assert cache["epimem_read_cache_groups"] >= 1 and cache["epimem_read_cache_bytes"] > 0
    assert cache["epimem_read_cache_max_bytes"] == bounds.max_bytes > cache["epimem_read_cache_bytes"]
    assert cache["epimem_read_cache_max_groups"] == bounds.max_groups and "epimem_read_cache_evictions_total" in cache


def test_groups_and_sessions(client: TestClient, group_id: str) -> None:
    base = f"/v1/groups/{group_id}"
    assert_error(client.get(base), 404, "not_found")
    assert_error(client.get(f"{base}/sessions/s1"), 404, "not_found")
    assert client.get(f"{base}/sessions").json() == {"sessions": []}

    put = client.put(base, json={"description": "Team A", "agent_ids": ["assistant"], "metadata": {"tier": 1}})
    assert put.status_code == 200, put.text
    config = client.get(base).json()
    assert config["group_id"] == group_id and config["description"] == "Team A" and config["metadata"] == {"tier": 1}
    replaced = client.put(base, json={"description": "Team A, renamed"}).json()
    assert replaced["created_at"] == config["created_at"] and replaced["updated_at"] >= config["updated_at"]
    assert_error(client.put(base, json={"group_id": "other"}), 422, "invalid_input")

    info = client.put(f"{base}/sessions/s1", json={"title": "Weekly sync", "user_ids": ["ana"]}).json()
    assert info["session_id"] == "s1" and info["title"] == "Weekly sync"
    client.post(f"{base}/sessions/s2/messages", json={"messages": messages(2)})
    listed = [s["session_id"] for s in client.get(f"{base}/sessions").json()["sessions"]]
    assert sorted(listed) == ["s1", "s2"]
    assert client.get(f"{base}/sessions/s1").json()["title"] == "Weekly sync"

    client.post(f"{base}/sessions/s2/flush")
    deleted = client.delete(f"{base}/sessions/s2")
    assert deleted.status_code == 200 and deleted.json()["collections"]
    assert [s["session_id"] for s in client.get(f"{base}/sessions").json()["sessions"]] == ["s1"]
    assert client.get(f"{base}/timeline").json()["episodes"] == []

    gone = client.delete(base)
    assert gone.status_code == 200
    assert_error(client.get(base), 404, "not_found")
    assert client.get(f"{base}/sessions").json() == {"sessions": []}


def test_delete_message_and_episode(client: TestClient, group_id: str) -> None:
    base = f"/v1/groups/{group_id}/sessions/s1"
    client.post(f"{base}/messages", json={"messages": messages(4)})
    (episode, *_) = client.post(f"{base}/flush").json()["episodes"]
    removed = client.delete(f"{base}/messages/{episode['source_message_ids'][0]}")
    assert removed.status_code == 200, removed.text
    assert episode["source_message_ids"][0] in removed.json()["messages"]
    remaining = [m["id"] for m in client.get(f"{base}/messages").json()["messages"]]
    assert episode["source_message_ids"][0] not in remaining

    current = client.get(f"/v1/groups/{group_id}/timeline").json()["episodes"][0]
    dropped = client.delete(f"{base}/episodes/{current['uuid']}")
    assert dropped.status_code == 200 and current["uuid"] in dropped.json()["episodes"]
    assert_error(client.get(f"{base}/episodes/{current['uuid']}"), 404, "not_found")
    assert_error(client.delete(f"{base}/episodes/{current['uuid']}"), 404, "not_found")


@pytest.mark.slow
def test_export_import_and_summaries(client: TestClient, group_id: str) -> None:
    base = f"/v1/groups/{group_id}"
    client.post(f"{base}/sessions/s1/messages", json={"messages": messages(6)})
    episodes = client.post(f"{base}/sessions/s1/flush").json()["episodes"]
    assert_error(client.get(f"/v1/groups/{group_id}-missing/export"), 404, "not_found")

    export = client.get(f"{base}/export")
    assert export.status_code == 200 and export.headers["content-type"].startswith("application/x-ndjson")
    lines = [line for line in export.text.splitlines() if line]
    assert json.loads(lines[0])["type"] == "header" and json.loads(lines[-1])["type"] == "end"

    copy = f"{group_id}-copy"
    imported = client.post(
        f"/v1/groups/{copy}/import", content=export.text.encode(), headers={"content-type": "application/x-ndjson"}
    )
    assert imported.status_code == 200, imported.text
    receipt = imported.json()
    assert receipt["group_id"] == copy and receipt["source_group_id"] == group_id
    assert receipt["messages"] == 6 and receipt["episodes"] == len(episodes)
    copied = client.get(f"/v1/groups/{copy}/timeline").json()["episodes"]
    assert sorted(e["title"] for e in copied) == sorted(e["title"] for e in episodes)
    assert all(e["group_id"] == copy for e in copied)
    again = client.post(f"/v1/groups/{copy}/import", content=export.text.encode())
    assert again.status_code == 200
    assert len(client.get(f"/v1/groups/{copy}/timeline").json()["episodes"]) == len(episodes)
    assert_error(client.post(f"/v1/groups/{copy}/import", content=b"\xff\xfe"), 422, "invalid_input")
    assert_error(client.post(f"/v1/groups/{copy}/import", content=b'{"type": "nonsense"}\n'), 422, "invalid_input")

    summaries = client.post(
        f"{base}/summaries",
        json={"days_back": 30, "max_memories_per_summary": 10, "reference_time": "2023-05-10T00:00:00Z"},
    )
    assert summaries.status_code == 200, summaries.text
    made = summaries.json()["episodes"]
    assert made and all(s["episode_type"] == "summary" for s in made)
    assert_error(client.post(f"{base}/summaries", json={"days_back": 0}), 422, "invalid_input")


# -- limits, errors, operations (one embedded store) ------------------------------------------------------


def test_every_error_has_the_one_shape(local_app: Callable[..., TestClient]) -> None:
    client = local_app()
    assert_error(client.get("/v1/nowhere"), 404, "not_found")
    assert_error(client.patch("/v1/groups/g"), 405, "method_not_allowed")
    assert_error(client.post("/v1/groups/g/search", content=b"{not json"), 422, "invalid_input")
    assert_error(client.post("/v1/groups/g/search", json={"query": "x", "k": 201}), 422, "invalid_input")
    assert_error(client.post("/v1/groups/g/search", json={"query": "x", "k": 0}), 422, "invalid_input")
    assert_error(client.post("/v1/groups/g/search", json={"query": ""}), 422, "invalid_input")
    assert_error(client.post("/v1/groups/g/search", json={"query": "x", "surprise": 1}), 422, "invalid_input")
    for outside in (-0.1, 1.5, "high"):  # a score is from 0 to 1
        assert_error(
            client.post("/v1/groups/g/search", json={"query": "x", "min_score": outside}), 422, "invalid_input"
        )
    assert_error(client.get("/v1/groups/g/timeline", params={"limit": 501}), 422, "invalid_input")
    assert_error(client.get("/v1/groups/g/timeline", params={"start": "not a date"}), 422, "invalid_input")
    assert_error(client.post("/v1/groups/g/context", json={"query": "x", "token_budget": 10**6}), 422, "invalid_input")
    assert_error(client.get("/v1/groups/g/sessions/s/messages", params={"limit": 0}), 422, "invalid_input")
    # Id formats: control characters, blank, too long -> 422; '/' cannot be addressed in a path -> 404.
    assert_error(client.get("/v1/groups/a%01b"), 422, "invalid_input")
    assert_error(client.get("/v1/groups/%20%20"), 422, "invalid_input")
    assert_error(client.get("/v1/groups/" + "g" * 501), 422, "invalid_input")
    assert_error(client.get("/v1/groups/g/sessions/s/messages/x%00"), 422, "invalid_input")
    assert_error(client.put("/v1/groups/g/sessions/s/messages/x"), 405, "method_not_allowed")
    assert_error(client.delete("/v1/groups/g/sessions/s/messages/" + "m" * 257), 422, "invalid_input")
    assert_error(client.get("/v1/groups/a%2Fb/sessions"), 404, "not_found")
    # Message validation inside the batch.
    bad = {"messages": [{"id": "1", "content": "   "}]}
    assert_error(client.post("/v1/groups/g/sessions/s/messages", json=bad), 422, "invalid_input")
    assert_error(client.post("/v1/groups/g/sessions/s/messages", json={"messages": []}), 422, "invalid_input")
    wrong_time = {"messages": [{"id": "1", "content": "hi", "timestamp": "yesterday-ish"}]}
    assert_error(client.post("/v1/groups/g/sessions/s/messages", json=wrong_time), 422, "invalid_input")
    twice = {"messages": [{"id": "1", "content": "a"}, {"id": "1", "content": "b"}]}
    assert_error(client.post("/v1/groups/g/sessions/s/messages", json=twice), 422, "invalid_input")


def test_limits_from_settings(local_app: Callable[..., TestClient], group_id: str) -> None:
    client = local_app(max_messages_per_batch=3, max_message_chars=100, max_body_bytes=4096)
    url = f"/v1/groups/{group_id}/sessions/s/messages"
    error = assert_error(client.post(url, json={"messages": messages(4)}), 413, "payload_too_large")
    assert error["details"] == {"max_messages_per_batch": 3, "received": 4}
    long = {"messages": [{"id": "long", "content": "x" * 101}]}
    assert_error(client.post(url, json=long), 422, "invalid_input")
    big = json.dumps({"messages": [{"id": "big", "content": "y" * 5000}]}).encode()
    assert_error(client.post(url, content=big), 413, "payload_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced on the stream itself
        for _ in range(10):
            yield b" " * 1000

    assert_error(client.post(url, content=chunks()), 413, "payload_too_large")
    # Nothing of the refused requests was stored.
    assert client.get(f"/v1/groups/{group_id}/sessions/s/messages").json()["messages"] == []
    accepted = client.post(url, json={"messages": messages(3)})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["accepted"] == ["m0", "m1", "m2"]


def test_health_readiness_request_ids_and_openapi(local_app: Callable[..., TestClient]) -> None:
    client = local_app()
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["model"].startswith("all-MiniLM-L6-v2")
    echoed = client.get("/healthz", headers={"X-Request-ID": "trace-123"})
    assert echoed.headers["x-request-id"] == "trace-123"
    minted = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"}).headers["x-request-id"]
    assert minted != "bad id with spaces" and len(minted) == 32
    assert client.get("/v1/nowhere").headers["x-request-id"]

    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    assert "/v1/groups/{group_id}/sessions/{session_id}/messages" in paths
    search = paths["/v1/groups/{group_id}/search"]["post"]
    assert search["requestBody"]["content"]["application/json"]["examples"]
    assert {"401", "403", "422", "503"} <= set(search["responses"])
    assert "ErrorBody" in schema["components"]["schemas"]


@pytest.mark.slow  # starts its own process (model load / a Chroma server)
def test_store_unavailable_is_503_with_retry_after(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, group_id: str
) -> None:
    from helpers.servers import ChromaServer

    server = ChromaServer(tmp_path / "chroma")
    server.start()
    try:
        service = Epimem.from_settings(
            Settings(data_dir=tmp_path, chroma_host="127.0.0.1", chroma_port=server.port),
            background=False,
            embedder=embedder,
        )
        with TestClient(create_app(service)) as client:
            assert client.get("/readyz").status_code == 200
            server.stop()
            for response in (
                client.get("/readyz"),
                client.post(f"/v1/groups/{group_id}/search", json={"query": "anything"}),
                client.post(f"/v1/groups/{group_id}/sessions/s/messages", json={"messages": messages(1)}),
            ):
                assert_error(response, 503, "store_unavailable")
                assert int(response.headers["retry-after"]) > 0
        service.close()
    finally:
        server.stop()


def test_deletion_schema_is_the_receipt_with_every_field_described(service: Epimem) -> None:
    schema = create_app(service).openapi()
    receipt = schema["components"]["schemas"]["DeletionReceipt"]["properties"]
    assert set(receipt) == {f.name for f in dataclasses.fields(DeletionReceipt)}
    assert all(field.get("description") for field in receipt.values())
    route = schema["paths"]["/v1/groups/{group_id}"]["delete"]["responses"]["200"]["content"]["application/json"]
    assert route["schema"] == {"$ref": "#/components/schemas/DeletionReceipt"}


def test_episodes_form_off_the_request_path(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service(background=True, auto_flush_pending=4, episode_max_messages=4)
    with TestClient(create_app(service)) as client:
        recovered(client)
        added = client.post(f"/v1/groups/{group_id}/sessions/s1/messages", json={"messages": messages(9)})
        assert added.status_code == 200 and added.json()["pending"] == 9  # answered before any formation
        assert service.wait_idle(timeout=120)
        formed = client.get(f"/v1/groups/{group_id}/timeline").json()["episodes"]
        assert formed and all(e["boundary_reason"] != "flush" for e in formed)
        assert client.get("/readyz").json()["recovering"] is False
