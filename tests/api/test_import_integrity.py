"""Import cannot rewrite memory, and what export wrote, import takes back (issue 32.3, 32.7): against a
real uvicorn server with API keys. An export whose episode was edited is refused (403 with a write key:
episodes are a restore; 409 with an admin key for every group) and nothing changes; an unchanged re-import
changes nothing; an export larger than the body cap of other requests
imports back over HTTP (the body streams under its own cap) and through the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, chat, two_episode_session
from helpers.http_client import HTTP
from helpers.servers import AppServer
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

ADMIN = "import-admin-key-0123456"
WRITER = "import-writer-key-012345"
GROUP = "ledger"
BODY_CAP = 64 * 1024


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("import-integrity")
    keys = [{"key": ADMIN, "groups": ["*"], "role": "admin"}, {"key": WRITER, "groups": ["*"], "role": "write"}]
    (folder / "keys.json").write_text(json.dumps({"keys": keys}))
    settings = Settings(data_dir=folder / "data", api_keys_file=folder / "keys.json", max_body_bytes=BODY_CAP)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    two_episode_session(service, GROUP, "s1", day=0)
    with AppServer(service) as app_server:
        yield app_server
    service.close()


def export(server: AppServer, group: str) -> list[dict]:
    response = HTTP.get(f"{server.url}/v1/groups/{group}/export", headers=_auth(ADMIN), timeout=120)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def send(server: AppServer, group: str, records: list[dict], key: str = WRITER) -> httpx.Response:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    headers = {**_auth(key), "content-type": "application/x-ndjson"}
    return HTTP.post(f"{server.url}/v1/groups/{group}/import", content=body, headers=headers, timeout=300)


def timeline(server: AppServer, group: str) -> list[tuple[str, str, str]]:
    page = HTTP.get(f"{server.url}/v1/groups/{group}/timeline", params={"limit": 200}, headers=_auth(WRITER))
    return [(e["uuid"], e["title"], e["content"]) for e in page.json()["episodes"]]


@pytest.mark.parametrize("field", ["title", "content", "source_message_ids"])
def test_an_edited_episode_cannot_be_imported_back(server: AppServer, field: str) -> None:
    records = export(server, GROUP)
    before = timeline(server, GROUP)
    index = next(i for i, r in enumerate(records) if r["type"] == "episode")
    episode = dict(records[index]["episode"])
    episode[field] = episode[field][:1] if field == "source_message_ids" else "FORGED: the dog was called Max"
    forged = [*records[:index], {**records[index], "episode": episode}, *records[index + 1 :]]
    assert send(server, GROUP, forged).status_code == 403  # episodes are a restore: not with a write key
    refused = send(server, GROUP, forged, key=ADMIN)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["ids"] == [episode["uuid"]]
    assert timeline(server, GROUP) == before
    search = HTTP.post(
        f"{server.url}/v1/groups/{GROUP}/search", json={"query": "FORGED Max"}, headers=_auth(WRITER), timeout=60
    )
    assert all("FORGED" not in hit["episode"]["content"] for hit in search.json()["hits"])


def test_an_unchanged_reimport_changes_nothing(server: AppServer) -> None:
    records = export(server, GROUP)
    before = timeline(server, GROUP)
    again = send(server, GROUP, records, key=ADMIN)
    assert again.status_code == 200, again.text
    assert timeline(server, GROUP) == before
    assert [r for r in export(server, GROUP) if r["type"] not in ("header",)] == [
        r for r in records if r["type"] not in ("header",)
    ]


def test_an_export_larger_than_the_body_cap_imports_back_over_http(server: AppServer) -> None:
    big = "big"
    messages = chat("b", 8, start=T0, marker="large")
    for i, message in enumerate(messages):
        message["content"] = f"Line {i} about the long trip. " + "A long account of the road. " * 400
    response = HTTP.post(
        f"{server.url}/v1/groups/{big}/sessions/s/messages", json={"messages": messages[:2]}, headers=_auth(WRITER)
    )
    assert response.status_code == 200, response.text
    for start in range(2, 8, 2):
        HTTP.post(
            f"{server.url}/v1/groups/{big}/sessions/s/messages",
            json={"messages": messages[start : start + 2]},
            headers=_auth(WRITER),
        ).raise_for_status()
    records = export(server, big)
    size = sum(len(json.dumps(r)) + 1 for r in records)
    assert size > BODY_CAP  # a body this large is refused on every other route
    imported = send(server, "big-copy", records)
    assert imported.status_code == 200, imported.text
    assert imported.json()["messages"] == 8
    copied = HTTP.get(f"{server.url}/v1/groups/big-copy/sessions/s/messages", headers=_auth(WRITER)).json()
    assert [m["content"] for m in copied["messages"]] == [m["content"] for m in messages]


def test_an_import_over_its_own_cap_is_a_413(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    settings = Settings(data_dir=tmp_path / "data", max_body_bytes=4096, max_import_bytes=8192)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    try:
        with AppServer(service) as local:
            body = b'{"type": "header"}\n' + b" " * 10_000 + b"\n"
            response = HTTP.post(
                f"{local.url}/v1/groups/g/import", content=body, headers={"content-type": "application/x-ndjson"}
            )
            assert response.status_code == 413 and response.json()["error"]["details"] == {"max_import_bytes": 8192}
            chunked = HTTP.post(
                f"{local.url}/v1/groups/g/import",
                content=iter([b" " * 5000, b" " * 5000]),  # no Content-Length: counted as it streams
                headers={"content-type": "application/x-ndjson"},
            )
            assert chunked.status_code == 413, chunked.text
    finally:
        service.close()


def test_the_cli_round_trip(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    source = tmp_path / "source"
    service = Epimem.from_settings(Settings(data_dir=source), background=False, embedder=embedder)
    two_episode_session(service, "cli", "s1", day=0)
    expected = [(m.id, m.content) for m in service.history("cli", "s1")]
    service.close()
    exported = tmp_path / "cli.jsonl"

    def cli(*args: str) -> Any:
        """The command line in this process, with the model already loaded (the console script itself is
        tested in tests/api/test_cli_output.py)."""
        return CliRunner().invoke(app, list(args), obj={"embedder": embedder})

    done = cli("export", "cli", "--output", str(exported), "--data-dir", str(source))
    assert done.exit_code == 0, done.output
    done = cli("import", str(exported), "--group", "cli-copy", "--data-dir", str(tmp_path / "target"))
    assert done.exit_code == 0, done.output
    target = Epimem.from_settings(Settings(data_dir=tmp_path / "target"), background=False, embedder=embedder)
    try:
        assert [(m.id, m.content) for m in target.history("cli-copy", "s1")] == expected
    finally:
        target.close()
