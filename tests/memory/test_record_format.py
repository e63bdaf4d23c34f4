"""Records written in an earlier format read the same as those memory.store.codec writes now, and rewriting
one leaves none of its old text behind: the first format (text as Chroma's document, every metadata key on
its own), the second (the text under TEXT_KEY, the packed keys under PACKED_KEY) and the third (the stamped
payload in one metadata value, BODY_KEY, whatever its length). What is written now begins with the time of the
write: under BODY_KEY when it fits in one metadata value, else as the document (tests/memory/test_long_records.py)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from helpers.builders import T0, chat, messages, two_episode_session
from helpers.checks import every_client, scan_client
from helpers.record_formats import second_format, third_format

from api.facade import Epimem
from memory.models import GroupConfiguration
from memory.readmodel.files import CLAIMED, FOLDER
from memory.store import codec

PAGE = 500


FORMATS = ("document", "keys", "body")  # the first format, the second, the third


def _old_record(text: str, metadata: dict[str, Any], layout: str) -> tuple[str | None, dict[str, Any]]:
    """A record's document and metadata as the format ``layout`` wrote them."""
    if layout == "document":
        return text, metadata or {"kind": "unknown"}
    if layout == "body":
        return None, third_format(text, metadata)
    return None, second_format(text, metadata)


def _to_old_format(service: Epimem, group_id: str, layout: str) -> int:
    """Rewrite every record of the group's collections (and its registry record) as an earlier format
    wrote it; the count of records rewritten."""
    rewritten = 0
    for client in every_client(service):
        for listed in client.list_collections():
            collection = client.get_collection(listed.name, embedding_function=None)
            owner = (collection.metadata or {}).get("group_id")
            if owner != group_id and listed.name != codec.REGISTRY:
                continue
            found = collection.get(include=["documents", "metadatas", "embeddings"])
            rows = codec.rows_of(found)
            if listed.name == codec.REGISTRY:
                keep = [i for i, (_, _, metadata) in enumerate(rows) if metadata.get("group_id") == group_id]
            else:
                keep = list(range(len(rows)))
            if not keep:
                continue
            ids = [rows[i][0] for i in keep]
            old = [_old_record(rows[i][1], rows[i][2], layout) for i in keep]
            collection.delete(ids=ids)
            for position, (document, metadata) in enumerate(old):
                collection.add(
                    ids=[ids[position]],
                    embeddings=[found["embeddings"][keep[position]]],
                    documents=None if document is None else [document],
                    metadatas=[metadata],
                )
            written = collection.get(ids=ids)["metadatas"] or []
            assert all((codec.BODY_KEY in m) == (layout == "body") for m in written)
            assert all((codec.TEXT_KEY in m) == (layout == "keys") for m in written)
            rewritten += len(ids)
    return rewritten


def _view(service: Epimem, group_id: str) -> dict[str, Any]:
    """Everything a caller reads of the group."""
    sessions = sorted(info.session_id for info in service.list_sessions(group_id))
    episodes = service.timeline(group_id, limit=200).episodes
    hits = service.search(group_id, "what did they say about the garden", k=10)
    return {
        "group": service.get_group(group_id).model_dump(),
        "sessions": [service.get_session(group_id, s).model_dump() for s in sessions],
        "history": {s: [m.model_dump() for m in service.history(group_id, s)] for s in sessions},
        "episodes": [e.model_dump() for e in episodes],
        "sources": {e.uuid: [m.id for m in service.episode_messages(group_id, e)] for e in episodes},
        "hits": sorted((h.episode.uuid, h.episode.content, h.pending) for h in hits),
        "pending": {s: service.pending_messages(group_id, s) for s in sessions},
        "vectors": service.vector_count(group_id),
    }


def _reopen(make_service: Callable[..., Epimem], service: Epimem) -> Epimem:
    """A new service on the same data, without the read snapshot the last one kept."""
    service.close()
    for name in (FOLDER, CLAIMED):  # (embedded only: a server keeps no file)
        shutil.rmtree(service.settings.data_dir / name, ignore_errors=True)
    return make_service()


def _filled(service: Epimem) -> str:
    group_id = f"fmt-{uuid.uuid4().hex[:8]}"
    service.put_group(GroupConfiguration(group_id=group_id, description="gardeners", metadata={"plan": "free"}))
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=3)
    service.add_messages(group_id, "s3", chat("open", 3, start=T0 + timedelta(days=9)))  # never flushed
    return group_id


@pytest.mark.slow
@pytest.mark.parametrize("layout", FORMATS)
def test_a_folder_in_an_earlier_record_format_reads_the_same(make_service: Callable[..., Epimem], layout: str) -> None:
    service = make_service()
    group_id = _filled(service)
    before = _view(service, group_id)
    assert before["episodes"] and before["pending"]["s3"] == 3 and before["hits"]

    assert _to_old_format(service, group_id, layout) >= before["vectors"]
    again = _reopen(make_service, service)
    assert _view(again, group_id) == before

    # and it takes new writes beside the old records
    again.add_messages(group_id, "s3", chat("more", 1, start=T0 + timedelta(days=9, hours=1)))
    assert again.pending_messages(group_id, "s3") == 4
    assert {m.id for m in again.history(group_id, "s3")} >= {m["id"] for m in before["history"]["s3"]}


@pytest.mark.parametrize("layout", FORMATS)
def test_rewriting_an_earlier_format_record_leaves_none_of_its_old_text(
    make_service: Callable[..., Epimem], layout: str
) -> None:
    service = make_service()
    group_id = f"fmt-{uuid.uuid4().hex[:8]}"
    secret = f"zq{uuid.uuid4().hex[:10]}"
    service.add_messages(group_id, "red", chat("r", 3, start=T0, marker=secret))
    (episode,) = service.flush(group_id, "red")
    assert scan_client(every_client(service), [secret], group_id=group_id)
    _to_old_format(service, group_id, layout)

    service = _reopen(make_service, service)
    receipt = service.redact_message(group_id, "red", "r-0")
    assert receipt.redacted and receipt.episodes == [episode.uuid]
    assert scan_client(every_client(service), [secret], group_id=group_id) == []
    (message,) = [m for m in service.history(group_id, "red") if m.id == "r-0"]
    assert message.content == "[redacted]"


def test_what_is_written_sorts_in_the_order_of_the_writes(make_service: Callable[..., Epimem]) -> None:
    """Chroma indexes string values in (key, value) order: each record's body begins with the time of its
    write, so a later write sorts after an earlier one whatever its text (the end of the index, not a
    random page of it), and the text reads back whole."""
    service = make_service()
    group_id = f"fmt-{uuid.uuid4().hex[:8]}"
    texts = ["zzz the last word first", "aaa the first word last", "mmm \u2028 and \u00e9 in between"]
    for number, line in enumerate(messages(3, prefix="o-", text=texts)):
        service.add_messages(group_id, "order", [line])
        assert line["id"] == f"o-{number}"
    log = service.memory.store.connection.client_for(codec.log_name(group_id)).get_collection(
        codec.log_name(group_id), embedding_function=None
    )
    ids = [codec.message_record_id("order", f"o-{n}") for n in range(3)]
    found = log.get(ids=ids, include=["documents", "metadatas"])
    order = [found["ids"].index(i) for i in ids]
    bodies = [str((found["metadatas"] or [])[i][codec.BODY_KEY]) for i in order]
    assert len(bodies) == 3 and bodies == sorted(bodies)
    assert [(found["documents"] or [])[i] for i in order] == [None] * 3  # short: no document
    assert [codec.read_back(None, (found["metadatas"] or [])[i])[0] for i in order] == texts
    assert [m.content for m in service.history(group_id, "order")] == texts


def test_the_later_of_a_body_and_a_document_is_the_record() -> None:
    """A record written in one layout and again in the other (its text grew past a metadata value, or shrank
    under it) keeps what the first write left where an upsert merges: the later stamp is the record's text."""
    short = codec.written(["r"], ["short text"], [{"kind": "episode", "title": "t"}])
    long_text = "word " * 2000
    longer = codec.written(["r"], [long_text], [{"kind": "episode", "title": "t"}])
    (body,) = short["metadatas"]
    (document,) = longer["documents"]
    assert short["documents"] == [None] and longer["metadatas"] == [{"kind": "episode"}]
    assert document[:16] > body["body"][:16]  # written after
    assert codec.read_back(document, body)[0] == long_text
    again = codec.written(["r"], ["short again"], [{"kind": "episode", "title": "t"}])
    (newer,) = again["metadatas"]
    assert codec.read_back(document, newer) == ("short again", {"kind": "episode", "title": "t"})
    assert codec.read_back(document, {"kind": "episode"}) == (long_text, {"kind": "episode", "title": "t"})
