"""One rule for a group that holds nothing (docs/http-api.md, "Unknown groups"), on every surface: a query of
its memory (search, context, timeline, its sessions) answers empty; what returns the group itself (its
configuration, its overview, its export) is 404 ``not_found``. HTTP, both clients, MCP and the command line
answer alike; the explorer reads the overview (tests/api/test_explorer.py shows its "not found")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers.builders import messages
from helpers.servers import AppServer
from mcp import Client
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.mcp.server import build_server
from api.settings import Settings
from epimem_client import AsyncEpimemClient, EpimemClient, NotFoundError
from memory.embedding.embedder import SentenceTransformerEmbedder

UNKNOWN = "nope"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def service(data_dir: Path, embedder: SentenceTransformerEmbedder) -> Epimem:
    service = Epimem.from_settings(Settings(data_dir=data_dir), background=False, embedder=embedder)
    service.add_messages("team-a", "s1", messages(3))
    service.flush("team-a", "s1")
    return service


def test_http_and_the_clients(service: Epimem) -> None:
    try:
        with AppServer(service) as server, EpimemClient(server.url) as memory:
            http = memory._http  # the same base URL, for the raw answers
            search = http.post(f"/v1/groups/{UNKNOWN}/search", json={"query": "dog"})
            assert (search.status_code, search.json()) == (200, {"hits": []})
            assert http.get(f"/v1/groups/{UNKNOWN}/timeline").json()["episodes"] == []
            assert http.get(f"/v1/groups/{UNKNOWN}/sessions").json() == {"sessions": []}
            context = http.post(f"/v1/groups/{UNKNOWN}/context", json={"query": "dog"}).json()
            assert context["citations"] == [] and context["tokens"] >= 0
            for path in ("", "/overview", "/export"):
                answer = http.get(f"/v1/groups/{UNKNOWN}{path}")
                assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found"), path

            assert memory.search(UNKNOWN, "dog") == []
            assert memory.timeline(UNKNOWN).episodes == []
            assert memory.list_sessions(UNKNOWN) == []
            assert memory.context(UNKNOWN, "dog").citations == []
            with pytest.raises(NotFoundError):
                memory.get_group(UNKNOWN)
            with pytest.raises(NotFoundError):
                list(memory.export_group(UNKNOWN))
            assert memory.search("team-a", "message")  # the known group still answers

            async def asynchronous() -> None:
                async with AsyncEpimemClient(server.url) as remote:
                    assert await remote.search(UNKNOWN, "dog") == []
                    with pytest.raises(NotFoundError):
                        await remote.get_group(UNKNOWN)

            asyncio.run(asynchronous())
    finally:
        service.close()


def test_mcp(service: Epimem) -> None:
    async def main() -> None:
        async with Client(build_server(lambda: service)) as client:
            for tool, arguments in (("search_memory", {"query": "dog"}), ("list_sessions", {})):
                answer = await client.call_tool(tool, {**arguments, "group": UNKNOWN})
                assert not answer.is_error, answer.content
                assert answer.structured_content == {"result": []}, (tool, answer.structured_content)
            known = await client.call_tool("search_memory", {"query": "message", "group": "team-a"})
            assert known.structured_content and known.structured_content["result"]

    try:
        asyncio.run(main())
    finally:
        service.close()


def test_command_line(service: Epimem, data_dir: Path, embedder: SentenceTransformerEmbedder) -> None:
    service.close()
    runner = CliRunner()
    where = ["--data-dir", str(data_dir)]
    for command in (["search", UNKNOWN, "dog"], ["timeline", UNKNOWN], ["context", UNKNOWN, "dog"]):
        result = runner.invoke(app, [*command, *where, "--json"], obj={"embedder": embedder})
        assert result.exit_code == 0, (command, result.output)
        assert f"note: group {UNKNOWN!r} holds nothing" in result.stderr
        assert "error" not in result.stderr
    export = runner.invoke(app, ["export", UNKNOWN, *where], obj={"embedder": embedder})
    assert export.exit_code == 1 and export.stderr.startswith("error (not_found): ")
