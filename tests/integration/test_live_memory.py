"""Live memory: what an add acknowledged is recalled at once, sessions close by themselves once they go
quiet, and nothing about pending messages escapes the rules formed ones follow. Real Chroma (embedded
and a server), real HTTP through uvicorn, a real MCP client, the LangChain adapter."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from helpers.builders import turns
from helpers.http_client import HTTP
from helpers.servers import AppServer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from api.facade import Epimem

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

REX = [
    ("Caroline", "I adopted a golden retriever called Rex yesterday."),
    ("Melanie", "Lovely! You should take Rex hiking at Lake Tahoe."),
]
POTTERY = [
    ("Jon", "My pottery class made blue vases this week."),
    ("Gina", "Blue vases sound great, bring one to the studio."),
]


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def post(url: str, path: str, body: Any = None) -> Any:
    response = HTTP.post(url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def get(url: str, path: str, **params: Any) -> Any:
    response = HTTP.get(url + path, params=params, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_an_acknowledged_add_is_recalled_at_once_over_http(
    make_service: Callable[..., Epimem], serve: Callable[..., AppServer], group_id: str
) -> None:
    service = make_service(background=True)
    url = serve(service).url
    other = group_id + "-other"
    post(url, f"/v1/groups/{group_id}/sessions/chat-1/messages", {"messages": turns(REX)})
    post(url, f"/v1/groups/{other}/sessions/chat-1/messages", {"messages": turns(POTTERY, prefix="p")})

    hits = post(url, f"/v1/groups/{group_id}/search", {"query": "Who has a dog?", "k": 3})["hits"]
    assert hits and hits[0]["pending"] is True
    assert hits[0]["episode"]["boundary_reason"] == "open"
    assert set(hits[0]["episode"]["source_message_ids"]) == {"m0", "m1"}
    assert all(hit["episode"]["group_id"] == group_id for hit in hits)  # never the other group's pending messages

    context = post(url, f"/v1/groups/{group_id}/context", {"query": "Where could Rex go hiking?", "token_budget": 120})
    assert "Lake Tahoe" in context["text"] and context["tokens"] <= 120
    assert context["citations"] and all(c["pending"] for c in context["citations"])
    assert {m for c in context["citations"] for m in c["message_ids"]} == {"m0", "m1"}
    assert "vase" not in context["text"]

    # The open episode behind a pending citation is there to read, with its messages.
    episode_id = context["citations"][0]["episode_id"]
    opened = get(url, f"/v1/groups/{group_id}/sessions/chat-1/episodes/{episode_id}", expand="messages")
    assert opened["pending"] is True and [m["id"] for m in opened["messages"]] == ["m0", "m1"]
    theirs = get(url, f"/v1/groups/{other}/sessions/chat-1/episodes/{episode_id}", expand="messages")
    assert theirs["episode"]["group_id"] == other and [m["id"] for m in theirs["messages"]] == ["p0", "p1"]
    assert HTTP.get(f"{url}/v1/groups/{group_id}/sessions/nope/episodes/{episode_id}", timeout=30).status_code == 404

    # Scope: another session or a time window outside the messages finds nothing pending.
    post(url, f"/v1/groups/{group_id}/sessions/chat-2/messages", {"messages": turns(POTTERY, prefix="q")})
    scoped = post(url, f"/v1/groups/{group_id}/search", {"query": "dog Rex", "session_ids": ["chat-2"]})["hits"]
    assert all(hit["episode"]["session_id"] == "chat-2" for hit in scoped)
    window = {"query": "dog Rex", "start": "2024-01-01T00:00:00Z"}
    assert post(url, f"/v1/groups/{group_id}/search", window)["hits"] == []

    overview = get(url, f"/v1/groups/{group_id}/overview")
    by_session = {s["session"]["session_id"]: s for s in overview["sessions"]}
    assert by_session["chat-1"]["pending"] == 2 and by_session["chat-1"]["open_episode_id"] == episode_id
    page = get(url, f"/v1/groups/{group_id}/timeline")  # what was said, in time order: the open episodes
    assert page["pending"] == [e["uuid"] for e in page["episodes"]] and episode_id in page["pending"]

    # Deleting a pending message removes it from recall at once.
    assert HTTP.delete(f"{url}/v1/groups/{group_id}/sessions/chat-1/messages/m0", timeout=60).status_code == 200
    again = post(url, f"/v1/groups/{group_id}/context", {"query": "Rex", "token_budget": 200})
    assert "golden retriever" not in again["text"]
    assert all("m0" not in c["message_ids"] for c in again["citations"])


def test_pending_messages_travel_through_export_and_import(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service()
    service.add_messages(group_id, "chat-1", turns(REX))
    lines = list(service.export_group(group_id))
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds.count("message_vector") == 2  # pending messages have their vectors already
    target = group_id + "-copy"
    receipt = service.import_group(lines, group_id=target)
    assert receipt.messages == 2
    hits = service.search(target, "Who adopted a dog?", k=3)
    assert hits and hits[0].pending and set(hits[0].episode.source_message_ids) == {"m0", "m1"}
    # A file without the vector lines (an older export): the import indexes the pending messages itself.
    bare = [line for line in lines if json.loads(line)["type"] != "message_vector"]
    end = json.loads(bare[-1])
    end["counts"]["message_vectors"] = 0
    bare[-1] = json.dumps(end) + "\n"
    service.import_group(bare, group_id=target + "-bare")
    assert service.search(target + "-bare", "Who adopted a dog?", k=3)[0].pending


def test_a_quiet_session_closes_by_itself(make_service: Callable[..., Epimem], group_id: str) -> None:
    """By arrival time: the messages are from 2023, yet the session stays open until none has arrived
    for the idle time, and a formation triggered meanwhile (recover) leaves it open."""
    service = make_service(background=True, episode_idle_seconds=3.0)
    started = time.monotonic()
    service.add_messages(group_id, "chat-1", turns(REX))
    service.recover()
    # Still open, unless the add and the recover took the whole idle time (a very loaded machine).
    assert service.pending_messages(group_id, "chat-1") == 2 or time.monotonic() - started >= 2.9
    wait_for(lambda: service.pending_messages(group_id, "chat-1") == 0, what="the idle session to be formed")
    assert time.monotonic() - started >= 2.9  # not before it went quiet (3 s after the messages arrived)
    page = service.timeline(group_id).episodes
    assert [e.boundary_reason.value for e in page] == ["idle"]
    hits = service.search(group_id, "Who has a dog?", k=3)
    assert hits and not hits[0].pending and hits[0].episode.uuid == page[0].uuid
    context = service.context(group_id, "Rex", token_budget=200)
    assert context.citations and not any(c.pending for c in context.citations)


def test_a_session_keeps_open_while_messages_keep_arriving(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service(background=True, episode_idle_seconds=5.0)
    lines = REX + POTTERY
    previous_add = time.monotonic()
    for number, line in enumerate(lines):
        this_add = time.monotonic()
        service.add_messages(group_id, "chat-1", turns([line], prefix=f"m{number}-"))
        page = service.timeline(group_id)
        # Nothing formed (one open episode), unless a loaded machine paused for the idle time between two arrivals.
        if time.monotonic() - previous_add < 5.0:
            assert page.pending == [e.uuid for e in page.episodes]
        previous_add = this_add
    wait_for(lambda: service.pending_messages(group_id, "chat-1") == 0, what="the session to close")
    formed = service.timeline(group_id).episodes
    assert sum(e.message_count for e in formed) == len(lines) and formed[-1].boundary_reason.value == "idle"


def test_what_went_idle_while_the_server_was_down_is_formed_at_start(
    make_service: Callable[..., Epimem], serve: Callable[..., AppServer], group_id: str
) -> None:
    first = make_service()
    first.add_messages(group_id, "quiet", turns(REX))
    first.close()
    time.sleep(1.2)
    second = make_service(background=True, episode_idle_seconds=1.0)
    serve(second)  # its startup recovery forms what is idle and watches the rest
    wait_for(lambda: second.pending_messages(group_id, "quiet") == 0, timeout=30, what="the startup scan")
    assert [e.boundary_reason.value for e in second.timeline(group_id).episodes] == ["idle"]
    second.add_messages(group_id, "fresh", turns(POTTERY, prefix="p"))
    wait_for(lambda: second.pending_messages(group_id, "fresh") == 0, what="the fresh session to close")
    assert second.timeline(group_id, session_id="fresh").episodes


def test_two_servers_on_one_chroma_form_a_session_once(
    backend: str, make_service: Callable[..., Epimem], group_id: str
) -> None:
    if backend != "server":
        pytest.skip("several epimem servers share a Chroma server only")
    one = make_service(background=True, episode_idle_seconds=1.0, coordination="lease")
    two = make_service(background=True, episode_idle_seconds=1.0, coordination="lease")
    lines = REX + POTTERY
    for number, line in enumerate(lines):  # both servers receive messages of the same session
        (one if number % 2 == 0 else two).add_messages(group_id, "shared", turns([line], prefix=f"m{number}-"))
    wait_for(lambda: one.pending_messages(group_id, "shared") == 0, what="the shared session to close")
    one.wait_idle(30)
    two.wait_idle(30)
    time.sleep(1.5)  # both timers ran out by now
    episodes = one.timeline(group_id, limit=50).episodes
    covered = [m for e in episodes for m in e.source_message_ids]
    assert sorted(covered) == sorted(f"m{n}-0" for n in range(len(lines)))  # each message in exactly one episode
    assert [e.uuid for e in two.timeline(group_id, limit=50).episodes] == [e.uuid for e in episodes]


def test_mcp_add_then_search_and_context_without_flush(
    make_service: Callable[..., Epimem], serve: Callable[..., AppServer], group_id: str
) -> None:
    url = serve(make_service(background=True)).url

    def data(result: Any) -> Any:
        assert not result.is_error, result.content
        content = result.structured_content
        if content is not None:
            return content.get("result", content) if set(content) == {"result"} else content
        return json.loads(result.content[0].text)

    async def main() -> None:
        http = httpx2.AsyncClient(timeout=180)
        async with Client(streamable_http_client(url + "/mcp", http_client=http), read_timeout_seconds=180) as client:
            added = data(
                await client.call_tool("add_messages", {"group": group_id, "session": "chat-1", "messages": turns(REX)})
            )
            assert added["accepted"] == ["m0", "m1"] and added["episodes_created"] == []
            hits = data(await client.call_tool("search_memory", {"group": group_id, "query": "Who has a dog?"}))
            assert hits and hits[0]["pending"] is True and set(hits[0]["message_ids"]) == {"m0", "m1"}
            context = data(await client.call_tool("get_context", {"group": group_id, "query": "Rex hiking"}))
            assert "Lake Tahoe" in context["text"] and context["citations"][0]["pending"] is True

    asyncio.run(main())


def test_langchain_history_then_retriever_without_flush(make_service: Callable[..., Epimem], group_id: str) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from api.integrations.langchain import EpimemChatMessageHistory, EpimemRetriever

    service = make_service()
    history = EpimemChatMessageHistory(memory=service, group_id=group_id, session_id="chat-1")
    history.add_messages(
        [HumanMessage("I adopted a golden retriever called Rex."), AIMessage("Rex will love hikes at Lake Tahoe.")]
    )
    docs = EpimemRetriever(memory=service, group_id=group_id, k=3).invoke("What is the dog called?")
    assert docs and "Rex" in docs[0].page_content and docs[0].metadata["pending"] is True


def test_received_time_not_message_time_decides(make_service: Callable[..., Epimem], group_id: str) -> None:
    """A message stamped years ago that just arrived is not idle; the boundary reason says why a tail closed."""
    service = make_service(episode_idle_seconds=3600)
    old = datetime(2020, 1, 1, tzinfo=UTC)
    service.add_messages(group_id, "s", turns(REX, start=old))
    service.recover()
    assert service.pending_messages(group_id, "s") == 2
    flushed = service.flush(group_id, "s")
    assert [e.boundary_reason.value for e in flushed] == ["flush"]


def test_a_deleted_pending_message_leaves_no_byte_on_disk(
    backend: str, make_service: Callable[..., Epimem], group_id: str, tmp_path: Path
) -> None:
    """The same erasure as for a formed message: the text and the id are gone from every file of the folder."""
    if backend != "embedded":
        pytest.skip("the data folder is embedded Chroma's")
    from memory.store.connection import close_embedded

    service = make_service()
    marker, secret_id = f"zqpending{uuid.uuid4().hex[:10]}", f"secretid{uuid.uuid4().hex[:10]}"
    said = turns([("Caroline", f"My locker code is {marker}."), ("Melanie", "Noted, I will forget it.")])
    said[0]["id"] = secret_id
    service.add_messages(group_id, "chat-1", said)
    assert service.search(group_id, "locker code", k=3)[0].pending
    folder = tmp_path / "data"

    def holding(needles: list[str]) -> set[str]:
        return {n for path in folder.rglob("*") if path.is_file() for n in needles if n.encode() in path.read_bytes()}

    assert holding([marker, secret_id]) == {marker, secret_id}
    service.delete_message(group_id, "chat-1", secret_id)
    assert marker not in service.context(group_id, "locker code", token_budget=200).text
    service.close()
    close_embedded(folder)  # stop the engine as a process exit would
    assert holding([marker, secret_id]) == set()
