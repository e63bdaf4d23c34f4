"""MCP follows the HTTP rules (issue 32.4, 27.4): the same role for the same act, the same batch limits,
errors that say in one sentence what is wrong (never the input), one stderr line per failure, 401 for an
expired key on every method of /mcp, 501 naming the extra without the SDK, and the HTTP client's own
error type when the server is down. Over streamable HTTP against a real uvicorn server with API keys,
and over stdio against a real ``epimem mcp`` subprocess."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.http_client import HTTP
from helpers.paths import ROOT
from helpers.servers import AppServer, free_port
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_mcp import data, epimem_command, http_client

from api.client import AsyncEpimemClient, EpimemClient
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.errors import EpimemError

ADMIN = "admin-key-0123456789abcdef"
WRITER = "writer-key-0123456789abcdef"
EXPIRED = "expired-key-0123456789abcdef"
GROUP = "team-a"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("mcp-rules")
    entries = [
        {"key": ADMIN, "groups": [GROUP], "role": "admin"},
        {"key": WRITER, "groups": [GROUP], "role": "write"},
        {"key": EXPIRED, "groups": [GROUP], "role": "admin", "expires": "2020-01-01T00:00:00Z"},
    ]
    (folder / "keys.json").write_text(json.dumps({"keys": entries}))
    settings = Settings(
        data_dir=folder / "data", api_keys_file=folder / "keys.json", max_messages_per_batch=20, max_message_chars=500
    )
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    with AppServer(service) as app_server:
        yield app_server
    service.close()


def call(url: str, key: str, tool: str, arguments: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with http_client(url, key) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(main())


def message(i: int, **fields: Any) -> dict[str, Any]:
    return {"id": f"m{i}", "content": f"message {i} about the lake", "timestamp": "2023-05-08T10:00:00Z", **fields}


def history(server: AppServer, session: str) -> list[str]:
    with EpimemClient(server.url, api_key=ADMIN) as memory:
        return [m.id for m in memory.history(GROUP, session)]


def test_deleting_a_session_needs_admin_as_over_http(server: AppServer) -> None:
    assert data(call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "s1", "messages": [message(0)]}))
    refused = call(server.url, WRITER, "delete_session", {"group": GROUP, "session": "s1"})
    assert refused.is_error and "needs admin" in refused.content[0].text
    over_http = HTTP.delete(
        f"{server.url}/v1/groups/{GROUP}/sessions/s1", headers={"authorization": f"Bearer {WRITER}"}, timeout=30
    )
    assert over_http.status_code == 403 and "needs admin" in over_http.json()["error"]["message"]
    assert history(server, "s1") == ["m0"]
    deleted = data(call(server.url, ADMIN, "delete_session", {"group": GROUP, "session": "s1"}))
    assert deleted["messages"] == 1 and history(server, "s1") == []


def test_batch_limits_are_the_http_ones(server: AppServer) -> None:
    too_many = [message(i) for i in range(21)]
    refused = call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "big", "messages": too_many})
    assert refused.is_error and refused.content[0].text.startswith("payload_too_large: a batch holds at most 20")
    long = [message(0), message(1, content="x" * 501)]
    refused = call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "big", "messages": long})
    assert refused.is_error and "longer than 500 characters" in refused.content[0].text
    assert history(server, "big") == []  # nothing of either batch was written


def test_validation_errors_say_what_is_wrong_and_the_log_holds_no_input(
    server: AppServer, caplog: pytest.LogCaptureFixture
) -> None:
    speaker = "S" * 501
    cases = [
        ([message(0, timestamp="not a time")], "messages.0.timestamp"),
        ([message(0, producer_id=speaker)], "messages.0.producer_id"),
        ([message(0, timestamp="0001-01-01T00:00:00Z")], "out of range"),  # refused by the domain model
        ([message(0, content=" ")], "content"),
    ]
    with caplog.at_level(logging.DEBUG):
        for messages, expected in cases:
            refused = call(server.url, WRITER, "add_messages", {"group": GROUP, "session": "v", "messages": messages})
            text = refused.content[0].text
            assert refused.is_error and text.startswith("invalid_input: ") and expected in text, text
            assert "Error executing tool" not in text and speaker not in text and "not a time" not in text
    # The server's records (the SDK's client logs what it sends at DEBUG: that is the caller's side).
    server_side = [r for r in caplog.records if not r.name.startswith(("mcp.client", "httpx", "httpcore"))]
    logged = "\n".join(r.getMessage() + str(r.exc_info or "") for r in server_side)
    assert "add_messages" in logged and speaker not in logged and "not a time" not in logged
    assert not [r for r in server_side if r.exc_info]
    assert history(server, "v") == []


def test_an_expired_key_gets_401_on_every_method_of_mcp(server: AppServer) -> None:
    headers = {"authorization": f"Bearer {EXPIRED}", "accept": "application/json, text/event-stream"}
    with HTTP.stream("GET", f"{server.url}/mcp", headers=headers, timeout=30) as stream:
        assert stream.status_code == 401  # not 200 and an open event stream
        assert "expired" in json.loads(stream.read())["error"]["message"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    post = HTTP.post(f"{server.url}/mcp", json=body, headers=headers, timeout=30)
    assert post.status_code == 401 and "expired" in post.json()["error"]["message"]


def test_the_client_raises_its_own_error_when_the_server_is_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with EpimemClient(url, timeout=5) as memory, pytest.raises(EpimemError) as raised:
        memory.search(GROUP, "anything")
    assert raised.value.code == "server_unreachable" and url in raised.value.message
    with EpimemClient(url, timeout=5) as memory, pytest.raises(EpimemError):
        list(memory.export_group(GROUP))

    async def main() -> None:
        async with AsyncEpimemClient(url, timeout=5) as memory:
            await memory.timeline(GROUP)

    with pytest.raises(EpimemError) as raised:
        asyncio.run(main())
    assert raised.value.code == "server_unreachable"


@pytest.mark.slow
def test_stdio_over_a_server_that_is_down_says_why_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    command, prefix = epimem_command()
    params = StdioServerParameters(
        command=command, args=[*prefix, "mcp", "--url", url, "--group", GROUP], env=dict(os.environ), cwd=str(ROOT)
    )
    errors = tmp_path / "stderr.log"

    async def main() -> list[str]:
        with errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=120) as client:
                texts = []
                for tool, arguments in (("search_memory", {"query": "Rex"}), ("list_sessions", {})):
                    result = await client.call_tool(tool, arguments)
                    assert result.is_error
                    texts.append(result.content[0].text)
                return texts

    texts = asyncio.run(main())
    for text in texts:
        assert text.startswith("server_unreachable: no epimem answered at " + url), text
    lines = [line for line in errors.read_text().splitlines() if line.strip()]
    assert len(lines) == 3, lines  # the warning at start, then one line per failed call
    assert "warning" in lines[0] and all(line.startswith("epimem mcp: ") for line in lines)


@pytest.mark.slow
def test_stdio_on_a_locked_folder_fails_with_one_line(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    folder = tmp_path / "data"
    holder = Epimem.from_settings(Settings(data_dir=folder), background=False, embedder=embedder)
    try:
        command, prefix = epimem_command()
        run = subprocess.run(
            [command, *prefix, "mcp", "--data-dir", str(folder)],
            input="",
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=False,
        )
    finally:
        holder.close()
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("epimem mcp: ") and "Traceback" not in run.stderr, run.stderr


@pytest.mark.slow
def test_mcp_without_the_extra_answers_501_naming_it(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "from fastapi.testclient import TestClient\n"
        "from api.server import create_app\n"
        "from api.settings import Settings\n"
        "client = TestClient(create_app(settings=Settings(data_dir=sys.argv[1])))\n"
        "for response in (client.get('/mcp'), client.post('/mcp', json={})):\n"
        "    print(response.status_code, response.json()['error']['message'])\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=os.environ)
    assert run.returncode == 0, run.stderr[-2000:]
    for line in run.stdout.strip().splitlines():
        assert line.startswith("501 ") and "pip install 'epimem-server[mcp]'" in line
