"""Records longer than one Chroma document (memory.store.parts): a message of hundreds of thousands of characters
is stored once, whole and verbatim, as a head and its pieces in the group's log, and every read, rewrite and
delete treats head and pieces as one record; ids of any length the caller may send stay within 128 bytes.
Both backends; the cloud profile (tests/helpers/cloud_profile.py) checks every call against the quotas."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from helpers.builders import T0, chat
from helpers.checks import every_client, scan_client

from api.facade import Epimem
from memory.models import GroupConfiguration, Message, SessionInfo, StoredMessage
from memory.store import codec
from memory.store.parts import PART_KIND
from memory.store.quotas import DOCUMENT_BYTES

# ASCII, two-, three- and four-byte characters, quotes and new lines: every way JSON and UTF-8 grow a text.
MIXED = 'Plain words, "quoted", a back\\slash, é à ü, 汉字和日本語, emoji 🦊🚀, a tab\tand\nnew lines. '


def long_text(characters: int, marker: str) -> str:
    """A text of ``characters`` characters with ``marker`` in its middle (far from the first document's worth)."""
    half = (MIXED * (characters // len(MIXED) + 1))[: characters // 2]
    return (half + marker + half)[:characters]


def pieces_in_log(service: Epimem, group_id: str) -> list[dict[str, Any]]:
    """The metadata of the pieces in the group's log, read raw."""
    name = codec.log_name(group_id)
    client = service.memory.store.connection.client_for(name)
    log = client.get_collection(name, embedding_function=None)
    found = log.get(where={"kind": PART_KIND}, include=["metadatas"], limit=300)
    return [dict(m or {}) for m in found["metadatas"] or []]


@pytest.mark.slow
def test_a_long_message_is_stored_whole_and_verbatim(make_service, group_id: str) -> None:
    service = make_service()
    marker = f"zq{uuid.uuid4().hex[:10]}"
    text = long_text(420_000, marker)
    lines = chat("a", 3, start=T0)
    lines[1]["content"] = text
    receipt = service.add_messages(group_id, "s", lines)
    assert receipt.accepted == ["a-0", "a-1", "a-2"]
    assert [m.content for m in service.history(group_id, "s")] == [lines[0]["content"], text, lines[2]["content"]]
    pieces = pieces_in_log(service, group_id)
    assert len(pieces) >= len(text.encode()) // DOCUMENT_BYTES  # stored once: pieces of the log only
    assert {p["part_of"] for p in pieces} == {codec.message_record_id("s", "a-1")}
    # The message's vector record carries its beginning (one document); search and context find it.
    hits = service.search(group_id, "emoji fox rocket quoted back slash", k=5)
    assert any(hit.pending for hit in hits)

    (episode,) = service.flush(group_id, "s")
    (read,) = service.timeline(group_id, limit=10).episodes
    assert read.content == episode.content and marker in read.content  # the episode's content, in pieces too
    assert [m.id for m in service.episode_messages(group_id, read)] == ["a-0", "a-1", "a-2"]
    assert [m.content for m in service.history(group_id, "s")] == [lines[0]["content"], text, lines[2]["content"]]
    # The episode's record (partition and index) shares its pieces; a correction replaces them.
    assert any(p["part_of"] == episode.uuid for p in pieces_in_log(service, group_id))
    service.correct_episode(group_id, "s", episode.uuid, content="A short account of a long message.")
    assert not any(p["part_of"] == episode.uuid for p in pieces_in_log(service, group_id))
    (corrected,) = service.timeline(group_id, limit=10).episodes
    assert corrected.content == "A short account of a long message."
    service.correct_episode(group_id, "s", episode.uuid, content=f"Long again: {text[:60_000]}")
    (corrected,) = service.timeline(group_id, limit=10).episodes
    assert corrected.content == f"Long again: {text[:60_000]}"
    assert any(h.episode.content == corrected.content for h in service.search(group_id, "long again fox", k=3))


@pytest.mark.slow
def test_deleting_or_redacting_a_long_message_takes_its_pieces(make_service, group_id: str) -> None:
    service = make_service()
    doomed, redacted = f"zqd{uuid.uuid4().hex[:10]}", f"zqr{uuid.uuid4().hex[:10]}"
    lines = chat("d", 3, start=T0)
    lines[0]["content"] = long_text(60_000, doomed)
    lines[1]["content"] = long_text(60_000, redacted)
    service.add_messages(group_id, "s", lines)
    assert {n for *_, n in scan_client(every_client(service), [doomed, redacted], group_id=group_id)} == {
        doomed,
        redacted,
    }
    service.delete_message(group_id, "s", "d-0")
    service.redact_message(group_id, "s", "d-1")
    assert scan_client(every_client(service), [doomed, redacted], group_id=group_id) == []
    assert pieces_in_log(service, group_id) == []
    assert [(m.id, m.content) for m in service.history(group_id, "s")] == [
        ("d-1", "[redacted]"),
        ("d-2", lines[2]["content"]),
    ]


@pytest.mark.slow
def test_a_session_or_group_deleted_takes_its_pieces(make_service, group_id: str) -> None:
    service = make_service()
    kept, gone = f"zqk{uuid.uuid4().hex[:10]}", f"zqg{uuid.uuid4().hex[:10]}"
    service.add_messages(group_id, "keep", [{"id": "k", "content": long_text(40_000, kept), "timestamp": T0}])
    service.add_messages(group_id, "gone", [{"id": "g", "content": long_text(40_000, gone), "timestamp": T0}])
    service.flush(group_id, "gone")
    service.delete_session(group_id, "gone")
    assert {n for *_, n in scan_client(every_client(service), [kept, gone], group_id=group_id)} == {kept}
    assert {p["session_id"] for p in pieces_in_log(service, group_id)} == {"keep"}
    service.delete_group(group_id)
    assert scan_client(every_client(service), [kept], group_id=group_id) == []


def test_long_session_and_group_records_read_back(make_service, group_id: str) -> None:
    """A session's or group's record of more than one document (a long description or title, and metadata up to its
    16,384-byte bound) rewritten shorter and longer."""
    service = make_service()
    big = {f"key{i}": "value " * 120 for i in range(20)}  # ~14.7 KB of JSON, within the metadata bound
    description = "🦊" * 9_999  # 40 KB of UTF-8
    service.put_group(GroupConfiguration(group_id=group_id, description=description, metadata=big))
    service.put_session(SessionInfo(group_id=group_id, session_id="s", title="汉" * 1000, metadata=big))
    group, session = service.get_group(group_id), service.get_session(group_id, "s")
    assert (group.description, group.metadata) == (description, big)
    assert (session.title, session.metadata) == ("汉" * 1000, big)
    count = len(pieces_in_log(service, group_id))
    assert count > 0
    service.put_session(SessionInfo(group_id=group_id, session_id="s", title="small"))
    assert service.get_session(group_id, "s").metadata == {}
    assert len(pieces_in_log(service, group_id)) < count  # the rewritten record's pieces went with it
    bigger = {**big, "more": "x" * 1000}
    service.put_group(GroupConfiguration(group_id=group_id, description=description + "!", metadata=bigger))
    group = service.get_group(group_id)
    assert (group.description, group.metadata) == (description + "!", bigger)


def test_ids_of_any_length_stay_within_chroma_limits(make_service) -> None:
    """Group and session ids of 500 four-byte characters and message ids of 256: collection names, record ids
    and collection metadata stay within Chroma Cloud's quotas (the cloud profile fails any call over them)."""
    service = make_service()
    group_id, session_id = "🦊" * 500, "汉" * 500
    message_id = "😀" * 256
    service.add_messages(group_id, session_id, [{"id": message_id, "content": "hello there", "timestamp": T0}])
    assert [m.id for m in service.history(group_id, session_id)] == [message_id]
    assert group_id in service.list_groups()
    assert [s.session_id for s in service.list_sessions(group_id)] == [session_id]
    service.flush(group_id, session_id)
    assert service.search(group_id, "hello", k=3)
    names = {name for name, _ in service.memory.store.admin.epimem_collections(group_id)}
    assert codec.partition_name(group_id, session_id) in names and codec.log_name(group_id) in names
    service.delete_group(group_id)
    assert group_id not in service.list_groups()


def test_an_add_that_loses_to_another_writer_leaves_no_pieces(make_service, group_id: str) -> None:
    """Two inserts of one message id (another server's add won first): the second keeps nothing."""
    service = make_service()
    first, second = f"zqa{uuid.uuid4().hex[:10]}", f"zqb{uuid.uuid4().hex[:10]}"
    log = service.memory.store.log

    def record(text: str) -> StoredMessage:
        return StoredMessage(group_id=group_id, session_id="s", message=Message(id="x", content=text, timestamp=T0))

    log.insert_messages(group_id, [record(long_text(50_000, first))])
    count = len(pieces_in_log(service, group_id))
    log.insert_messages(group_id, [record(long_text(70_000, second))])
    assert len(pieces_in_log(service, group_id)) == count
    assert scan_client(every_client(service), [second], group_id=group_id) == []
    (message,) = service.history(group_id, "s")
    assert first in message.content


@pytest.mark.slow
def test_a_long_message_with_others_in_one_batch_and_after_a_restart(make_service, group_id: str) -> None:
    service = make_service()
    lines = chat("b", 12, start=T0)
    for position in (2, 7):
        lines[position]["content"] = long_text(30_000 + position, f"zq{position}")
    service.add_messages(group_id, "s", lines[:6])
    service.add_messages(group_id, "s", lines[6:])
    service.flush(group_id, "s")
    service.close()
    again = make_service()
    assert [m.content for m in again.history(group_id, "s")] == [line["content"] for line in lines]
    later = chat("c", 1, start=T0 + timedelta(hours=2))
    again.add_messages(group_id, "s", later)
    assert [m.id for m in again.history(group_id, "s")][-1] == "c-0"
