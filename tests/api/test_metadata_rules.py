"""A client cannot set what epimem keeps for itself, and metadata is bounded like content: a metadata key starting
with ``epimem_`` (``epimem_redacted`` marks a redacted message) is refused with 422 naming it on every surface that
takes metadata (HTTP, MCP, the thin client, the facade, a conversation import, sessions, groups, corrections); an
admin's redaction always redacts, even a message an admin restore brought in with the mark; client metadata over
``MAX_METADATA_BYTES`` is a 422 naming the bound. Against a real uvicorn server with API keys, on both backends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.builders import T0
from helpers.http_client import HTTP
from helpers.servers import AppServer
from test_mcp import http_client

from api.client import EpimemClient
from api.facade import Epimem
from memory.errors import InvalidInputError
from memory.models import MAX_METADATA_BYTES

ADMIN = "rules-admin-all-0123456789"
WRITER = "rules-writer-0123456789ab"


@pytest.fixture
def server(make_service: Callable[..., Epimem], serve: Callable[..., AppServer], tmp_path: Path) -> AppServer:
    entries = [
        {"key": ADMIN, "groups": ["*"], "role": "admin", "name": "ops"},
        {"key": WRITER, "groups": ["*"], "role": "write", "name": "writer"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": entries}))
    return serve(make_service(api_keys_file=tmp_path / "keys.json"))


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def said(metadata: dict[str, Any], message_id: str = "m1") -> dict[str, Any]:
    return {"id": message_id, "content": "Ana keeps the spare key under the mat.", "metadata": metadata}


def conversation(group_id: str, message: dict[str, Any]) -> bytes:
    header = {"type": "header", "format": "epimem-export", "version": 1, "group_id": group_id}
    header |= {"exported_at": T0.isoformat(), "embedding_model": {"id": "any"}, "embeddings": False}
    record = {"group_id": group_id, "session_id": "s", "message": {**message, "timestamp": T0.isoformat()}}
    counts = {"sessions": 0, "messages": 1, "episodes": 0, "summaries": 0, "message_vectors": 0}
    lines = [header, {"type": "message", "record": record}, {"type": "end", "counts": counts}]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def mcp_add(url: str, group: str, message: dict[str, Any]) -> str:
    async def main() -> str:
        async with http_client(url, WRITER) as client:
            result = await client.call_tool("add_messages", {"group": group, "session": "s", "messages": [message]})
            assert result.is_error, result.content
            return str(result.content[0].text)

    return asyncio.run(main())


def refusals(server: AppServer, metadata: dict[str, Any], group: str) -> dict[str, str]:
    """The message of the refusal of ``metadata`` on each surface that takes it (all must refuse it)."""
    url, found = server.url, {}
    messages = f"{url}/v1/groups/{group}/sessions/s/messages"
    for name, response in {
        "http": HTTP.post(messages, json={"messages": [said(metadata)]}, headers=auth(WRITER), timeout=60),
        "session": HTTP.put(f"{url}/v1/groups/{group}/sessions/s", json={"metadata": metadata}, headers=auth(WRITER)),
        "group": HTTP.put(f"{url}/v1/groups/{group}", json={"metadata": metadata}, headers=auth(WRITER)),
        "import": HTTP.post(
            f"{url}/v1/groups/{group}/import",
            content=conversation(group, said(metadata)),
            headers={**auth(WRITER), "content-type": "application/x-ndjson"},
            timeout=60,
        ),
    }.items():
        assert response.status_code == 422, (name, response.text)
        found[name] = response.json()["error"]["message"]
    found["mcp"] = mcp_add(url, group, said(metadata))
    with EpimemClient(url, api_key=WRITER) as client, pytest.raises(InvalidInputError) as raised:
        client.add_messages(group, "s", [said(metadata)])
    found["client"] = raised.value.message
    assert server.service is not None
    with pytest.raises(InvalidInputError) as raised:
        server.service.add_messages(group, "s", [said(metadata)])
    found["facade"] = raised.value.message
    return found


@pytest.mark.parametrize("key", ["epimem_redacted", "Epimem_Anything"])
def test_a_reserved_key_is_refused_by_name_on_every_surface(server: AppServer, key: str, group_id: str) -> None:
    group = group_id
    found = refusals(server, {key: True, "channel": "email"}, group)
    assert all(key in text and "reserved" in text for text in found.values()), found
    assert server.service is not None
    assert server.service.history(group, "s") == [] and not server.service.group_exists(group)


@pytest.mark.slow
def test_metadata_is_bounded_like_content(server: AppServer, group_id: str) -> None:
    group = group_id
    found = refusals(server, {"note": "x" * MAX_METADATA_BYTES}, group)
    assert all(str(MAX_METADATA_BYTES) in text for text in found.values()), found
    huge = HTTP.post(
        f"{server.url}/v1/groups/{group}/sessions/s/messages",
        json={"messages": [said({"blob": "y" * 4_500_000})]},
        headers=auth(WRITER),
        timeout=120,
    )
    assert huge.status_code == 422 and huge.json()["error"]["details"]["max_metadata_bytes"] == MAX_METADATA_BYTES
    fits = {"note": "x" * (MAX_METADATA_BYTES - 20)}
    added = HTTP.post(
        f"{server.url}/v1/groups/{group}/sessions/s/messages", json={"messages": [said(fits)]}, headers=auth(WRITER)
    )
    assert added.status_code == 200, added.text
    assert server.service is not None
    (episode,) = server.service.flush(group, "s")
    correction = {"user_metadata": {"note": "z" * (MAX_METADATA_BYTES + 1)}}
    corrected = HTTP.patch(
        f"{server.url}/v1/groups/{group}/sessions/s/episodes/{episode.uuid}", json=correction, headers=auth(WRITER)
    )
    assert corrected.status_code == 422 and str(MAX_METADATA_BYTES) in corrected.text
    reserved = HTTP.patch(
        f"{server.url}/v1/groups/{group}/sessions/s/episodes/{episode.uuid}",
        json={"user_metadata": {"epimem_redacted": True}},
        headers=auth(WRITER),
    )
    assert reserved.status_code == 422 and "epimem_redacted" in reserved.text


def test_an_admin_redaction_always_redacts(server: AppServer, group_id: str) -> None:
    group = group_id
    secret = "the safe code is 90210"
    message = {"id": "m1", "content": f"Ana says {secret}.", "metadata": {"epimem_redacted": True}}
    restored = HTTP.post(  # a restore may carry the mark (an export of a redacted message does)
        f"{server.url}/v1/groups/{group}/import",
        content=conversation(group, message),
        headers={**auth(ADMIN), "content-type": "application/x-ndjson"},
        timeout=60,
    )
    assert restored.status_code == 200, restored.text
    redact = f"{server.url}/v1/groups/{group}/sessions/s/messages/m1/redact"
    first = HTTP.post(redact, headers=auth(ADMIN), timeout=120)
    assert first.status_code == 200 and first.json()["redacted"] is True, first.text
    assert server.service is not None
    (stored,) = server.service.history(group, "s")
    assert stored.content == "[redacted]" and stored.metadata == {"epimem_redacted": True}
    assert secret not in "".join(server.service.export_group(group))
    assert all(secret not in h.episode.content for h in server.service.search(group, "safe code", k=10))
    again = HTTP.post(redact, json={"replacement": "[gone]"}, headers=auth(ADMIN), timeout=120)
    assert again.json()["redacted"] is False  # redacting a redacted message changes nothing
