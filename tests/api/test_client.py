"""The Python HTTP clients (sync and async) against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.builders import T0, messages
from helpers.servers import AppServer

from api.errors import ForbiddenError, PayloadTooLargeError, UnauthorizedError
from api.facade import Epimem
from api.settings import Settings
from epimem_client import (
    AddReceipt,
    AsyncEpimemClient,
    DeletionReceipt,
    EpimemClient,
    Episode,
    GroupConfiguration,
    ImportReceipt,
    SearchHit,
    ServerUnreachableError,
    SessionInfo,
    TimelinePage,
)
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.errors import ConflictError, InvalidInputError, NotFoundError


@pytest.mark.slow
def test_sync_client_mirrors_the_facade(service: Epimem, serve: Callable[..., AppServer], group_id: str) -> None:
    with EpimemClient(serve(service).url) as memory:
        assert memory.ready()
        receipt = memory.add_messages(group_id, "s1", messages(5))
        assert isinstance(receipt, AddReceipt) and receipt.accepted == [f"m{i}" for i in range(5)]
        assert memory.add_messages(group_id, "s1", messages(2)).duplicates == ["m0", "m1"]
        with pytest.raises(ConflictError) as conflict:
            memory.add_messages(group_id, "s1", [dict(messages(1)[0], content="changed")])
        assert conflict.value.details == {"ids": ["m0"]}

        episodes = memory.flush(group_id, "s1")
        assert episodes and all(isinstance(e, Episode) for e in episodes)
        episode = memory.get_episode(group_id, "s1", episodes[0].uuid)
        assert episode == episodes[0]
        assert [m.id for m in memory.episode_messages(group_id, episode)] == list(episode.source_message_ids)
        with pytest.raises(NotFoundError):
            memory.get_episode(group_id, "s1", "nope")

        hits = memory.search(group_id, "hiking with Rex", k=2)
        assert hits and isinstance(hits[0], SearchHit) and hits[0].episode.group_id == group_id
        assert all(0 < hit.score < 1 for hit in hits) and hits[0].components.raw >= hits[-1].components.raw
        above = memory.search(group_id, "hiking with Rex", k=2, min_score=hits[0].score)
        assert [hit.episode.uuid for hit in above] == [hit.episode.uuid for hit in hits if hit.score >= hits[0].score]
        with pytest.raises(InvalidInputError):
            memory.search(group_id, "hiking with Rex", min_score=2)
        context = memory.context(group_id, "Who is Rex?", token_budget=120)
        assert 0 < context.tokens <= 120 and context.citations
        assert [c.marker for c in context.citations] == [f"[{n}]" for n in range(1, len(context.citations) + 1)]
        assert all(f"{c.marker} " in context.text for c in context.citations)
        page = memory.timeline(group_id, session_id="s1", limit=1)
        assert isinstance(page, TimelinePage) and len(page.episodes) == 1
        first = memory.history(group_id, "s1", limit=1)
        assert [m.id for m in first] == ["m0"] and first.next_cursor is not None
        assert [m.id for m in memory.history(group_id, "s1", limit=2, cursor=first.next_cursor)] == ["m1", "m2"]

        config = memory.put_group(GroupConfiguration(group_id=group_id, description="team"))
        assert memory.get_group(group_id).description == config.description == "team"
        memory.put_session(SessionInfo(group_id=group_id, session_id="s1", title="Chat"))
        assert memory.get_session(group_id, "s1").title == "Chat"
        assert [s.session_id for s in memory.list_sessions(group_id)] == ["s1"]

        lines = list(memory.export_group(group_id))
        assert json.loads(lines[0])["type"] == "header"
        imported = memory.import_group(lines, group_id=f"{group_id}-copy")
        assert isinstance(imported, ImportReceipt) and imported.messages == 5
        assert len(memory.timeline(f"{group_id}-copy").episodes) == len(episodes)
        summaries = memory.generate_summaries(group_id, days_back=30, reference_time=T0 + timedelta(days=1))
        assert summaries and all(s.episode_type == "summary" for s in summaries)

        deleted = memory.delete_message(group_id, "s1", "m4")
        assert isinstance(deleted, DeletionReceipt) and "m4" in deleted.messages
        remaining = memory.timeline(group_id, session_id="s1").episodes
        assert memory.delete_episode(group_id, "s1", remaining[0].uuid).episodes == [remaining[0].uuid]
        assert memory.delete_session(group_id, "s1").collections
        memory.delete_group(group_id)
        with pytest.raises(NotFoundError):
            memory.get_group(group_id)
        with pytest.raises(NotFoundError):
            list(memory.export_group(group_id))

        # Ids that a URL path could mangle: '.' and '..' are encoded; '/' cannot be addressed at all.
        dots = f"{group_id}-dots"
        memory.add_messages(dots, "..", messages(2))
        assert [s.session_id for s in memory.list_sessions(dots)] == [".."]
        with pytest.raises(InvalidInputError):
            memory.add_messages("a/b", "s", messages(1))
        with pytest.raises(InvalidInputError, match="k"):  # checked by the server, said as a 422
            memory.search(group_id, "x", k=500)


def test_async_client(service: Epimem, serve: Callable[..., AppServer], group_id: str) -> None:
    url = serve(service).url

    async def flow() -> None:
        async with AsyncEpimemClient(url) as memory:
            assert await memory.ready()
            assert (await memory.add_messages(group_id, "s1", messages(3))).accepted == ["m0", "m1", "m2"]
            episodes = await memory.flush(group_id, "s1")
            assert episodes
            hits = await memory.search(group_id, "Lake Tahoe")
            assert hits[0].episode.uuid in {e.uuid for e in episodes}
            assert await memory.search(group_id, "Lake Tahoe", min_score=1.0) == []  # no score reaches 1
            context = await memory.context(group_id, "Lake Tahoe", token_budget=120)
            assert [c.marker for c in context.citations] == [f"[{n}]" for n in range(1, len(context.citations) + 1)]
            assert context.citations and context.text.splitlines()[2].startswith("[1] ")  # under the day's line
            assert (await memory.timeline(group_id)).episodes
            assert (await memory.get_episode(group_id, "s1", episodes[0].uuid)).uuid == episodes[0].uuid
            lines = [line async for line in memory.export_group(group_id)]
            assert json.loads(lines[-1])["type"] == "end"
            with pytest.raises(NotFoundError):
                await memory.get_session(group_id, "missing")
            assert (await memory.delete_group(group_id)).collections

    asyncio.run(flow())


def test_auth_errors_come_back_as_exceptions(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, serve: Callable[..., AppServer]
) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "reader-key-0123456789", "groups": ["team-a"], "role": "read"}]}))
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path / "data", api_keys_file=keys), background=False, embedder=embedder
    )
    try:
        url = serve(service).url
        with EpimemClient(url) as anonymous, pytest.raises(UnauthorizedError):
            anonymous.search("team-a", "x")
        with EpimemClient(url, api_key="reader-key-0123456789") as reader:
            assert reader.search("team-a", "anything") == []
            with pytest.raises(ForbiddenError):
                reader.search("team-b", "x")
            with pytest.raises(ForbiddenError):
                reader.add_messages("team-a", "s", messages(1))
    finally:
        service.close()


def test_body_limit_on_a_real_socket(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, serve: Callable[..., AppServer]
) -> None:
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path, max_body_bytes=2048), background=False, embedder=embedder
    )
    try:
        server = serve(service)

        def raw(request: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(request)
                sock.shutdown(socket.SHUT_WR)
                return b"".join(iter(lambda: sock.recv(65536), b""))

        head = b"POST /v1/groups/g/sessions/s/messages HTTP/1.1\r\nHost: [::1]\r\nContent-Type: application/json\r\n"
        # Chunked, no Content-Length: counted while read.
        chunk = b"x" * 1000
        chunked = head + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        chunked += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3)) + b"0\r\n\r\n"
        answer = raw(chunked)
        assert answer.startswith(b"HTTP/1.1 413") and b'"payload_too_large"' in answer
        # A declared size over the limit is refused at once.
        declared = head + b"Content-Length: 999999\r\nConnection: close\r\n\r\n{}"
        assert raw(declared).startswith(b"HTTP/1.1 413")

        with EpimemClient(server.url) as memory, pytest.raises(PayloadTooLargeError):
            memory.add_messages("g", "s", [{"id": "1", "content": "y" * 3000}])
    finally:
        service.close()


def test_a_server_that_is_not_running_is_said_as_such() -> None:
    """No epimem at the URL: the client's own error, naming the URL and what to check, not httpx's."""
    with socket.socket() as sock:  # a port that nothing listens on once this socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with EpimemClient(url, timeout=5) as memory:
        with pytest.raises(ServerUnreachableError, match=f"no epimem answered at {url}.*epimem serve"):
            memory.search("g", "x")
        with pytest.raises(ServerUnreachableError):
            list(memory.export_group("g"))
        assert memory.ready() is False

    async def scenario() -> None:
        async with AsyncEpimemClient(url, timeout=5) as memory:
            with pytest.raises(ServerUnreachableError, match="no epimem answered"):
                await memory.add_messages("g", "s", [{"id": "1", "content": "x"}])

    asyncio.run(scenario())
