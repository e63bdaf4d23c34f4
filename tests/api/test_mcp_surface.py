"""Every surface signs its changes and follows the same rules: MCP with API keys signs adds, flushes, corrections
and session deletes with the key's name in the audit trail; it validates timestamps as HTTP does, never echoes a
long value back, speaks the same field names as HTTP, the clients and files (an unknown field is refused by
name on both), and the MCP library's log lines come out in the server's JSON format. Against a real uvicorn
server with API keys, and a real ``epimem serve`` process for the log."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.http_client import HTTP
from helpers.servers import AppServer, ServerProcess
from test_mcp import data, http_client

from api.facade import Epimem
from api.mcp.shapes import ChatMessage
from api.settings import Settings
from epimem_client.models import Message as WireMessage
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import Message

ADMIN = "surface-admin-key-0123456789"
WRITER = "surface-writer-key-012345678"
GROUP = "team-a"
MAX_ERROR_CHARS = 500  # docs/trust.md: a refusal's text is at most this long


def keys_file(folder: Path) -> Path:
    entries = [
        {"key": ADMIN, "groups": ["*"], "role": "admin", "name": "ops"},
        {"key": WRITER, "groups": [GROUP], "role": "write", "name": "support-bot"},
    ]
    path = folder / "keys.json"
    path.write_text(json.dumps({"keys": entries}))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("mcp-surface")
    settings = Settings(data_dir=folder / "data", api_keys_file=keys_file(folder))
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    with AppServer(service) as app_server:
        yield app_server
    service.close()


def call(url: str, key: str, tool: str, arguments: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with http_client(url, key) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(main())


def refusal(result: Any) -> str:
    assert result.is_error, result.content
    return str(result.content[0].text)


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def http_add(server: AppServer, session: str, messages: list[dict[str, Any]]) -> httpx.Response:
    url = f"{server.url}/v1/groups/{GROUP}/sessions/{session}/messages"
    return HTTP.post(url, json={"messages": messages}, headers=auth(WRITER), timeout=60)


def history(server: AppServer, session: str) -> list[dict[str, Any]]:
    url = f"{server.url}/v1/groups/{GROUP}/sessions/{session}/messages"
    response = HTTP.get(url, headers=auth(WRITER), timeout=60)
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


@pytest.mark.slow
def test_mcp_changes_are_signed_by_the_key_in_the_audit_trail(server: AppServer) -> None:
    said = [
        {"id": "a1", "content": "Ana booked the cabin by the lake.", "producer_id": "ana"},
        {"id": "a2", "content": "Ben will bring the kayak.", "producer_id": "ben"},
    ]
    added = data(call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "signed", "messages": said}))
    assert added["accepted"] == ["a1", "a2"]
    flushed = data(
        call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "signed", "messages": said, "flush": True})
    )
    (episode_id,) = flushed["episodes_created"]
    corrected = {"group": GROUP, "session": "signed", "episode_id": episode_id, "title": "The cabin trip"}
    data(call(server.url, WRITER, "correct_episode", corrected))
    data(call(server.url, ADMIN, "delete_session", {"group": GROUP, "session": "signed"}))
    page = HTTP.get(f"{server.url}/v1/groups/{GROUP}/audit", params={"limit": 500}, headers=auth(ADMIN), timeout=60)
    assert page.status_code == 200, page.text
    actors = {(e["action"], e["actor"]) for e in page.json()["entries"]}
    assert {("add", "support-bot"), ("flush", "support-bot"), ("correct", "support-bot")} <= actors
    assert ("delete_session", "ops") in actors
    assert not [pair for pair in actors if pair[1] == "local"], actors


def test_mcp_validates_timestamps_as_http_does(server: AppServer) -> None:
    milliseconds = 1_700_000_000_000
    message = {"id": "t1", "content": "A time in milliseconds.", "timestamp": milliseconds}
    over_http = http_add(server, "times", [message])
    assert over_http.status_code == 422, over_http.text
    arguments = {"group": GROUP, "session": "times", "messages": [message]}
    text = refusal(call(server.url, WRITER, "add_messages", arguments))
    assert text.startswith("invalid_input: messages.0.timestamp") and "seconds since 1970" in text, text
    assert str(milliseconds) not in text  # the rule, not the value
    timeline = {"group": GROUP, "start": milliseconds}
    assert refusal(call(server.url, WRITER, "get_timeline", timeline)).startswith("invalid_input: start")
    refused = HTTP.get(
        f"{server.url}/v1/groups/{GROUP}/timeline", params={"start": milliseconds}, headers=auth(WRITER), timeout=60
    )
    assert refused.status_code == 422, refused.text
    seconds = {"id": "t2", "content": "A time in seconds.", "timestamp": 1_700_000_000}
    data(call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "times", "messages": [seconds]}))
    assert [(m["id"], m["timestamp"]) for m in history(server, "times")] == [("t2", "2023-11-14T22:13:20Z")]


def test_mcp_error_text_is_bounded(server: AppServer) -> None:
    long = "x" * 50_000
    cases = [
        ("get_episode", {"group": GROUP, "session": "s", "episode_id": long}),
        ("get_episode", {"group": GROUP, "session": long, "episode_id": "e"}),
        ("get_message", {"group": GROUP, "session": "s", "message_id": long}),
        ("search_memory", {"group": GROUP + long, "query": "lake"}),
        ("add_messages", {"group": GROUP, "session": "s", "messages": [{"id": long, "content": "hi"}]}),
    ]
    for tool, arguments in cases:
        text = refusal(call(server.url, ADMIN, tool, arguments))
        assert len(text) <= MAX_ERROR_CHARS and long[:1000] not in text, (tool, len(text))


def test_the_message_fields_are_named_alike_everywhere() -> None:
    assert set(ChatMessage.model_fields) == set(Message.model_fields) == set(WireMessage.model_fields)


def test_mcp_stores_every_field_http_stores(server: AppServer) -> None:
    message = {
        "id": "f1",
        "content": "Ana asked Ben about the kayak.",
        "role": "assistant",
        "producer_id": "ana",
        "produced_for_id": "ben",
        "timestamp": "2024-03-01T10:00:00Z",
        "metadata": {"channel": "email", "priority": 2},
    }
    data(call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "fields-mcp", "messages": [message]}))
    assert http_add(server, "fields-http", [message]).status_code == 200
    assert history(server, "fields-mcp") == history(server, "fields-http") == [message]


@pytest.mark.parametrize("field", ["speaker", "mood"])
def test_an_unknown_field_is_refused_by_name_never_dropped(server: AppServer, field: str) -> None:
    message = {"id": "u1", "content": "Who said this?", field: "ana"}
    arguments = {"group": GROUP, "session": "unknown", "messages": [message]}
    text = refusal(call(server.url, WRITER, "add_messages", arguments))
    assert text.startswith("invalid_input: messages.0") and field in text, text
    if field == "speaker":
        assert "producer_id" in text  # says what to use instead
    over_http = http_add(server, "unknown", [message])
    assert over_http.status_code == 422 and field in over_http.json()["error"]["message"], over_http.text
    assert history(server, "unknown") == []


@pytest.mark.slow  # starts its own process
def test_the_server_log_is_json_lines_with_mcp_calls(tmp_path: Path) -> None:
    env = dict(os.environ, EPIMEM_DATA_DIR=str(tmp_path / "data"), EPIMEM_API_KEYS_FILE=str(keys_file(tmp_path)))
    log = tmp_path / "serve.log"
    with ServerProcess.serve(env=env, log=log) as process:
        message = {"id": "1", "content": "Ana booked the cabin.", "producer_id": "ana"}
        data(call(process.url, WRITER, "add_messages", {"group": GROUP, "session": "s", "messages": [message]}))
        refusal(call(process.url, WRITER, "get_episode", {"group": GROUP, "session": "s", "episode_id": "nope"}))
        refusal(call(process.url, WRITER, "add_messages", {"group": GROUP, "session": "s", "messages": [{"id": "2"}]}))
        data(call(process.url, WRITER, "search_memory", {"group": GROUP, "query": "cabin"}))
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    banner = [line for line in lines if line.startswith("epimem is listening")]  # the CLI's one line for people
    records = [json.loads(line) for line in lines if line not in banner]  # every other line is a JSON record
    assert len(banner) == 1 and any(r["logger"] == "epimem.mcp" for r in records)
