"""Two epimem servers on one Chroma server share their keys and their counters: a key made on one works on the
other, a key revoked or rotated on one is refused by the other once its recheck has run (no restart), and the
messages per day and stored characters of a key or a group are counted across both."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, turns
from helpers.http_client import HTTP
from helpers.servers import AppServer, ChromaServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Each test over about a second on a quiet core: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

ROOT = "root-shared-0123456789abcdef"
RECHECK_S = 0.05


def call(server: AppServer, method: str, path: str, key: str | None = ROOT, **options: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return HTTP.request(method, f"{server.url}{path}", headers=headers, timeout=120, **options)


def add(server: AppServer, key: str, group: str, ids: list[str], size: int = 10) -> httpx.Response:
    messages = turns([("ana", "y" * size) for _ in ids], start=T0)
    for message, message_id in zip(messages, ids, strict=True):
        message["id"] = message_id
    return call(server, "POST", f"/v1/groups/{group}/sessions/s1/messages", key, json={"messages": messages})


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll a condition (bounded by a generous deadline, not a speed assumption)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(RECHECK_S)


@pytest.fixture
def pair(
    chroma_server: ChromaServer, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> Iterator[tuple[AppServer, AppServer]]:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": ROOT, "groups": ["*"], "role": "admin", "name": "root-shared"}]}))
    services, servers = [], []
    for name in ("a", "b"):
        settings = Settings(
            data_dir=tmp_path / name,
            chroma_host="127.0.0.1",
            chroma_port=chroma_server.port,
            api_keys_file=keys,
            keys_recheck_s=RECHECK_S,
            usage_refresh_s=0,
        )
        services.append(Epimem.from_settings(settings, background=False, embedder=embedder))
        servers.append(AppServer(services[-1]).start())
    yield servers[0], servers[1]
    for server in servers:
        server.stop()
    for service in services:
        service.close()


def test_keys_made_revoked_and_rotated_on_one_server_count_on_the_other(
    pair: tuple[AppServer, AppServer], group_id: str
) -> None:
    a, b = pair
    made = call(a, "POST", "/v1/keys", json={"name": f"shared-{group_id}", "groups": [group_id], "role": "write"})
    assert made.status_code == 201
    secret, key_id = made.json()["key"], made.json()["id"]
    until(lambda: add(b, secret, group_id, ["m1"]).status_code == 200, "B accepts the key made on A")

    rotated = call(b, "POST", f"/v1/keys/{key_id}/rotate").json()["key"]
    assert add(b, secret, group_id, ["m2"]).status_code == 401  # at once where it was rotated
    until(lambda: add(a, secret, group_id, ["m2"]).status_code == 401, "A refuses the secret rotated on B")
    assert add(a, rotated, group_id, ["m2"]).status_code == 200

    assert call(a, "DELETE", f"/v1/keys/{key_id}").status_code == 200
    assert add(a, rotated, group_id, ["m3"]).status_code == 401
    until(lambda: add(b, rotated, group_id, ["m3"]).status_code == 401, "B refuses the key revoked on A")
    assert {k["id"]: k for k in call(b, "GET", "/v1/keys").json()["keys"]}[key_id]["status"] == "revoked"


def test_daily_messages_and_stored_characters_are_counted_across_servers(
    pair: tuple[AppServer, AppServer], group_id: str
) -> None:
    a, b = pair
    body = {"name": f"counted-{group_id}", "groups": ["*"], "role": "admin", "limits": {"messages_per_day": 5}}
    made = call(a, "POST", "/v1/keys", json=body).json()
    secret = made["key"]
    until(lambda: call(b, "GET", f"/v1/groups/{group_id}/sessions", secret).status_code == 200, "B knows the key")
    assert add(a, secret, group_id, ["a1", "a2", "a3"]).status_code == 200
    assert add(b, secret, group_id, ["b1", "b2"]).status_code == 200
    answer = add(b, secret, group_id, ["b3"])
    assert answer.status_code == 429 and answer.json()["error"]["details"]["used"] == 5
    assert add(a, secret, group_id, ["a4"]).status_code == 429
    listed = {k["id"]: k for k in call(b, "GET", "/v1/keys").json()["keys"]}
    assert listed[made["id"]]["usage"] == {"messages_today": 5}

    small = f"{group_id}-small"
    assert call(a, "PUT", f"/v1/groups/{small}/limits", json={"stored_chars": 100}).status_code == 200
    until(lambda: call(b, "GET", f"/v1/groups/{small}/usage").json()["limits"] == {"stored_chars": 100}, "B sees it")
    assert add(a, ROOT, small, ["c1"], size=60).status_code == 200
    refused = add(b, ROOT, small, ["c2"], size=60)
    assert refused.status_code == 429 and refused.json()["error"]["details"]["limit"] == "stored_chars"
    assert call(b, "DELETE", f"/v1/groups/{small}/sessions/s1").status_code == 200  # B recounts at its next recheck

    def emptied() -> bool:
        return int(call(a, "GET", f"/v1/groups/{small}/usage").json()["usage"]["stored_chars"]) == 0

    until(emptied, "A sees the recount B made after its deletion")
    assert add(a, ROOT, small, ["c2"], size=60).status_code == 200
