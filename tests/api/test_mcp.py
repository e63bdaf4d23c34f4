"""The MCP server, driven by the official SDK's own client: over stdio against a real
``epimem mcp`` subprocess, and over streamable HTTP against the ``/mcp`` endpoint of a real
uvicorn server with API keys."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from helpers.builders import turns
from helpers.docs_blocks import blocks, run_block
from helpers.http_client import HTTP
from helpers.paths import BIN, ROOT
from helpers.servers import AppServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from api.facade import Epimem
from api.settings import Settings
from epimem_client import EpimemClient
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

TOOLS = {
    "add_messages",
    "search_memory",
    "get_context",
    "get_timeline",
    "get_episode",
    "get_message",
    "list_sessions",
    "correct_episode",
    "delete_session",
}
ADMIN = "admin-key-0123456789abcdef"
WRITER = "writer-key-0123456789abcdef"
READER = "reader-key-0123456789abcdef"


def conversation() -> list[dict[str, Any]]:
    lines = [
        ("Caroline", "I adopted a golden retriever called Rex last weekend."),
        ("Melanie", "Lovely! How is Rex settling in at home?"),
        ("Caroline", "Rex loves the park by the lake, we walk there every morning."),
        ("Melanie", "I started pottery classes on Tuesdays, making a blue vase."),
    ]
    return turns(lines)


def data(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    return json.loads(result.content[0].text)


def check_schemas(tools: list[Any]) -> None:
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == TOOLS
    for tool in tools:
        assert tool.description, tool.name
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description") or name == "messages", (tool.name, name)
    add = by_name["add_messages"].input_schema
    assert set(add["required"]) == {"session", "messages"}
    assert "group" not in add.get("required", [])
    search = by_name["search_memory"].input_schema["properties"]
    assert {"query", "k", "min_score", "sessions", "time", "reference_time", "group"} <= set(search)
    assert "token_budget" in by_name["get_context"].input_schema["properties"]
    assert by_name["delete_session"].annotations.destructive_hint is True
    assert by_name["search_memory"].annotations.read_only_hint is True


async def exercise(client: Client, group: str | None) -> None:
    """The round trip of the issue: list, add, flush, search, context, timeline, episode, delete."""
    check_schemas((await client.list_tools()).tools)
    where = {"group": group} if group else {}
    added = data(
        await client.call_tool(
            "add_messages", {**where, "session": "chat-1", "messages": conversation(), "flush": True}
        )
    )
    assert added["accepted"] == ["m0", "m1", "m2", "m3"] and added["episodes_created"]
    again = data(await client.call_tool("add_messages", {**where, "session": "chat-1", "messages": conversation()}))
    assert again["accepted"] == [] and len(again["duplicates"]) == 4
    hits = data(await client.call_tool("search_memory", {**where, "query": "What is the dog called?", "k": 3}))
    assert hits and "Rex" in hits[0]["content"] and hits[0]["session_id"] == "chat-1"
    assert all(0 <= hit["score"] <= 1 for hit in hits)
    # min_score keeps the hits scoring at least it (0..1); out of that scale it is refused.
    threshold = (hits[0]["score"] + hits[-1]["score"]) / 2 - 1e-4
    above = data(
        await client.call_tool(
            "search_memory", {**where, "query": "What is the dog called?", "k": 3, "min_score": threshold}
        )
    )
    assert [hit["episode_id"] for hit in above] == [hit["episode_id"] for hit in hits if hit["score"] >= threshold]
    refused = await client.call_tool("search_memory", {**where, "query": "dog", "min_score": 1.5})
    assert refused.is_error and "min_score" in refused.content[0].text
    context = data(await client.call_tool("get_context", {**where, "query": "Rex the dog", "token_budget": 200}))
    assert "Rex" in context["text"] and context["citations"] and context["tokens"] <= 200
    # Each piece of the text opens with its citation's marker, [1]..[N] in the order of the citations.
    markers = [citation["marker"] for citation in context["citations"]]
    assert markers == [f"[{n}]" for n in range(1, len(markers) + 1)]
    assert re.findall(r"^(\[\d+\]) ", context["text"], flags=re.M) == markers
    page = data(await client.call_tool("get_timeline", {**where, "session": "chat-1"}))
    assert [e["uuid"] for e in page["episodes"]] == added["episodes_created"]
    episode = data(
        await client.call_tool("get_episode", {**where, "session": "chat-1", "episode_id": hits[0]["episode_id"]})
    )
    assert {m["id"] for m in episode["messages"]} == set(hits[0]["message_ids"])
    # A cited message, whole (what an excerpt's span points into).
    message = data(await client.call_tool("get_message", {**where, "session": "chat-1", "message_id": "m0"}))
    assert message["id"] == "m0" and message["content"] == conversation()[0]["content"]
    missing = await client.call_tool("get_message", {**where, "session": "chat-1", "message_id": "nope"})
    assert missing.is_error and "not_found" in missing.content[0].text
    melanie = data(
        await client.call_tool("get_context", {**where, "query": "Rex the dog", "filter": {"speakers": ["Melanie"]}})
    )
    cited = {m for c in melanie["citations"] for m in c["message_ids"]}
    assert cited and cited <= {"m1", "m3"} and "Caroline:" not in melanie["text"]
    assert data(await client.call_tool("search_memory", {**where, "query": "Rex", "filter": {"roles": ["tool"]}})) == []
    bad = await client.call_tool("search_memory", {**where, "query": "Rex", "filter": {"metadata": {"$where": "1"}}})
    assert bad.is_error and "invalid_input" in bad.content[0].text
    corrected = data(
        await client.call_tool(
            "correct_episode",
            {**where, "session": "chat-1", "episode_id": hits[0]["episode_id"], "title": "Rex, the golden retriever"},
        )
    )
    assert corrected["episode"]["title"] == "Rex, the golden retriever"
    sessions = data(await client.call_tool("list_sessions", where))
    assert [s["session_id"] for s in sessions] == ["chat-1"]
    deleted = data(await client.call_tool("delete_session", {**where, "session": "chat-1"}))
    assert deleted["messages"] == 4
    assert data(await client.call_tool("search_memory", {**where, "query": "Rex"})) == []


def epimem_command() -> tuple[str, list[str]]:
    """The installed ``epimem`` script beside this interpreter, else the same CLI through ``-m``."""
    script = BIN / "epimem"
    return (str(script), []) if script.exists() else (sys.executable, ["-m", "api.cli"])


def test_stdio_subprocess_round_trip(tmp_path: Path) -> None:
    """The stdio config block of docs/integrations.md, as a client would launch it."""
    config = json.loads(blocks(__file__, "json")[0])["mcpServers"]["epimem"]
    assert config["command"] == "epimem"
    args = [str(tmp_path / "data") if a == "/path/to/epimem-data" else a for a in config["args"]]
    command, prefix = epimem_command()
    params = StdioServerParameters(
        command=command,
        args=[*prefix, *args],
        env={"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"},
        cwd=str(ROOT),
    )
    errors = tmp_path / "server-stderr.log"

    async def main() -> None:
        with errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=180) as client:
                await exercise(client, None)  # the default group (--group team-a) is used
                refused = await client.call_tool("search_memory", {"query": "x", "group": "bad\x00group"})
                assert refused.is_error and "invalid_input" in refused.content[0].text

    try:
        asyncio.run(main())
    except BaseException:
        print(errors.read_text()[-6000:])  # the server's own traceback, for the failure report
        raise


@pytest.fixture
def keyed_server(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    keys = tmp_path / "keys.json"
    entries = [
        {"key": ADMIN, "groups": ["team-a"], "role": "admin"},
        {"key": WRITER, "groups": ["team-a"], "role": "write"},
        {"key": READER, "groups": ["team-a"], "role": "read"},
    ]
    keys.write_text(json.dumps({"keys": entries}))
    settings = Settings(data_dir=tmp_path / "data", api_keys_file=keys)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    with AppServer(service) as server:
        yield server
    service.close()


def http_client(url: str, key: str | None) -> Client:
    """Connect as the HTTP config block of docs/integrations.md says (its url and headers)."""
    config = json.loads(blocks(__file__, "json")[1])["mcpServers"]["epimem"]
    assert config["url"] == "http://127.0.0.1:8000/mcp"
    url = config["url"].replace("http://127.0.0.1:8000", url)
    headers = {k: v.replace("YOUR-API-KEY", key) for k, v in config["headers"].items()} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=180)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=180)


def test_streamable_http_round_trip_with_keys_and_scope(keyed_server: AppServer) -> None:
    url = keyed_server.url

    async def main() -> None:
        async with http_client(url, ADMIN) as client:  # exercise ends with a delete: admin, as over HTTP
            await exercise(client, "team-a")
            assert keyed_server.service is not None
            signed = [e.actor for e in keyed_server.service.audit("team-a").entries if e.action == "correct"]
            assert signed and signed[0].startswith("key-") and ADMIN not in signed[0]  # the key's id, not its secret
            other = await client.call_tool("search_memory", {"group": "team-b", "query": "Rex"})
            assert other.is_error and "forbidden" in other.content[0].text
            bad = await client.call_tool("search_memory", {"group": "team-a", "query": "x", "sessions": ["a\x00b"]})
            assert bad.is_error and "invalid_input: session_ids.0" in bad.content[0].text
            no_group = await client.call_tool("list_sessions", {})
            assert no_group.is_error and "no group" in no_group.content[0].text
        async with http_client(url, READER) as reader:
            assert data(await reader.call_tool("list_sessions", {"group": "team-a"})) == []
            write = await reader.call_tool("add_messages", {"group": "team-a", "session": "c", "messages": []})
            assert write.is_error and "invalid_input: messages" in write.content[0].text
            delete = await reader.call_tool("delete_session", {"group": "team-a", "session": "chat-1"})
            assert delete.is_error and "needs admin" in delete.content[0].text

    asyncio.run(main())


def test_http_endpoint_refuses_missing_and_wrong_keys(keyed_server: AppServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    for key in (None, "wrong-key-0123456789abcdef"):
        auth = {"authorization": f"Bearer {key}"} if key else {}
        response = HTTP.post(f"{keyed_server.url}/mcp", json=body, headers={**headers, **auth}, timeout=30)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"


def test_mcp_is_optional(tmp_path: Path) -> None:
    """Without the SDK the app still builds, and /mcp answers 501 (with it, the SDK serves /mcp)."""
    code = (
        "import sys\n"
        "if sys.argv[1] == 'blocked': sys.modules['mcp'] = None\n"
        "from api.server import create_app\n"
        "from api.settings import Settings\n"
        "app = create_app(settings=Settings(data_dir=sys.argv[2]))\n"
        "print([type(r.endpoint).__name__ for r in app.router.routes if getattr(r, 'path', '') == '/mcp'])\n"
    )
    for mode, expected in (("blocked", "['_NotInstalled']"), ("present", "['_KeyedEndpoint']")):
        run = subprocess.run(
            [sys.executable, "-c", code, mode, str(tmp_path)], capture_output=True, text=True, env=os.environ
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip().splitlines()[-1] == expected


def test_docs_python_example(keyed_server: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with EpimemClient(keyed_server.url, api_key=WRITER) as memory:
        memory.add_messages("team-a", "chat-1", [{"id": "d1", "content": "Ana adopted a dog called Rex."}])
        memory.flush("team-a", "chat-1")
    monkeypatch.setenv("EPIMEM_API_KEY", READER)
    namespace = run_block(__file__, keyed_server.url, monkeypatch)
    assert "Rex" in namespace["context"]


def test_stdio_over_a_running_server_keeps_the_key_scope(keyed_server: AppServer, tmp_path: Path) -> None:
    """``epimem mcp --url … --api-key …``: the tools go through the HTTP client, so the server's key
    scoping applies (and no model is loaded in the MCP process)."""
    with EpimemClient(keyed_server.url, api_key=WRITER) as memory:
        memory.add_messages("team-a", "chat-1", [{"id": "u1", "content": "Ben plays the cello on Sundays."}])
        memory.flush("team-a", "chat-1")
    command, prefix = epimem_command()
    params = StdioServerParameters(
        command=command,
        args=[*prefix, "mcp", "--url", keyed_server.url, "--group", "team-a"],
        env={"EPIMEM_API_KEY": READER},
        cwd=str(ROOT),
    )

    async def main() -> None:
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=120) as client:
                hits = data(await client.call_tool("search_memory", {"query": "What does Ben play?"}))
                assert hits and "cello" in hits[0]["content"]
                other = await client.call_tool("search_memory", {"query": "cello", "group": "team-b"})
                assert other.is_error and "forbidden" in other.content[0].text
                write = await client.call_tool("delete_session", {"session": "chat-1"})
                assert write.is_error and "forbidden" in write.content[0].text

    asyncio.run(main())
