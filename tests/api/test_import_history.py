"""Import cannot rewrite history: it adds what the group lacks and never changes what it holds (409 naming the id,
a difference in any field), a write key imports a conversation (sessions and messages, formed by epimem) while
episodes, summaries, revisions and embeddings are a restore for an admin key of every group, and what a delete or a
redaction erased never comes back. Against a real uvicorn server with API keys, on both Chroma backends.

Sub-points of the round's second promise: (a) revisions, (b) a message's other fields, (c) a formed message set
back to pending, (d) an invented episode, (e) an older export after a redaction or a delete."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, chat, two_episode_session
from helpers.http_client import HTTP
from helpers.servers import AppServer, ChromaServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

ADMIN = "history-admin-all-0123456789"  # admin of every group: may restore
SCOPED = "history-admin-h-0123456789a"  # admin of the h-* groups only: may not
WRITER = "history-writer-0123456789ab"
KEYS = [
    {"key": ADMIN, "groups": ["*"], "role": "admin", "name": "ops"},
    {"key": SCOPED, "groups": ["h-*"], "role": "admin", "name": "team-admin"},
    {"key": WRITER, "groups": ["*"], "role": "write", "name": "writer"},
]


def keys_file(folder: Path) -> Path:
    path = folder / "keys.json"
    path.write_text(json.dumps({"keys": KEYS}))
    return path


class Served:
    def __init__(self, service: Epimem, server: AppServer) -> None:
        self.service, self.server, self.url = service, server, server.url


@pytest.fixture(scope="module")
def served(
    backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder, request: Any
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("import-history")
    values: dict[str, Any] = {"data_dir": folder / "data", "api_keys_file": keys_file(folder)}
    if backend == "server":
        chroma: ChromaServer = request.getfixturevalue("chroma_server")
        values.update(chroma_host="127.0.0.1", chroma_port=chroma.port)
    service = Epimem.from_settings(Settings(**values), background=False, embedder=embedder)
    with AppServer(service) as server:
        yield Served(service, server)
    service.close()


def group() -> str:
    return f"h-{uuid.uuid4().hex[:10]}"


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def export(url: str, group_id: str, **params: Any) -> list[dict[str, Any]]:
    response = HTTP.get(f"{url}/v1/groups/{group_id}/export", params=params, headers=auth(ADMIN), timeout=120)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def send(url: str, group_id: str, records: list[dict[str, Any]], key: str) -> httpx.Response:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    headers = {**auth(key), "content-type": "application/x-ndjson"}
    return HTTP.post(f"{url}/v1/groups/{group_id}/import", content=body, headers=headers, timeout=600)


def recounted(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with an end record that counts them (after a test removed or added lines)."""
    body = [r for r in records if r["type"] != "end"]
    kinds = [r["type"] for r in body]
    counts = {"sessions": kinds.count("session"), "messages": kinds.count("message")}
    counts |= {"episodes": kinds.count("episode"), "summaries": kinds.count("summary")}
    counts["message_vectors"] = kinds.count("message_vector")
    if "revision" in kinds:
        counts["revisions"] = kinds.count("revision")
    return [*body, {"type": "end", "counts": counts}]


def conversation(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a write key may import: the header, the sessions and the messages."""
    return recounted([r for r in records if r["type"] in ("header", "session", "message", "group")])


def stored(url: str, group_id: str) -> list[str]:
    """Everything the group holds as an export writes it (but the export's own time), one JSON text per line."""
    lines = export(url, group_id)
    return sorted(json.dumps(r, sort_keys=True) for r in lines if r["type"] != "header")


def refused(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json()["error"])


def seeded(service: Epimem, *, corrected: bool = False) -> tuple[str, str]:
    """A group of two formed sessions; with ``corrected``, its first episode corrected (a revision history)."""
    group_id = group()
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=3)
    first = service.timeline(group_id, session_id="s1", limit=10).episodes[0]
    if corrected:
        service.correct_episode(group_id, "s1", first.uuid, title="A title set by hand", reason="clearer")
    return group_id, first.uuid


# -- who may import what -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_write_key_imports_a_conversation_that_epimem_forms(served: Served) -> None:
    source, _ = seeded(served.service)
    target = group()
    done = send(served.url, target, conversation(export(served.url, source)), WRITER)
    assert done.status_code == 200, done.text
    assert done.json()["messages"] == 8
    history = served.service.history(target, "s1")
    assert [m.id for m in history] == [m.id for m in served.service.history(source, "s1")]
    assert served.service.pending_messages(target, "s1") == 4  # stored as an add stores them, not as "done"
    hits = served.service.search(target, served.service.history(source, "s1")[0].content, k=3)
    assert hits and hits[0].pending  # recalled at once, as its session's open episode
    formed = served.service.flush(target, "s1")
    assert formed and all(e.generation.value == "offline" for e in formed)  # made by epimem, not taken as written
    entries = served.service.audit(target, limit=10).entries
    assert ("import", "writer") in {(e.action.value, e.actor) for e in entries}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["episode", "summary", "revision", "embedding"])
@pytest.mark.parametrize("key", [WRITER, SCOPED])
def test_what_epimem_made_is_a_restore_for_an_admin_of_every_group(served: Served, kind: str, key: str) -> None:
    source, first = seeded(served.service, corrected=True)
    served.service.generate_summaries(
        source, days_back=3650, max_memories_per_summary=10, reference_time=T0 + timedelta(days=30)
    )
    records = export(served.url, source, include_embeddings=kind == "embedding")
    if kind == "embedding":
        lines = [r for r in records if r["type"] in ("header", "session", "message", "message_vector")]
    else:
        lines = [r for r in records if r["type"] in ("header", "session", "message", kind)]
    assert any(r["type"] == kind or "embedding" in r for r in lines[1:])
    target = group()
    error = refused(send(served.url, target, recounted(lines), key), 403)
    assert error["details"]["kind"] == kind and "admin key for every group" in error["message"]
    assert not served.service.group_exists(target)  # nothing of the file was written
    restored = send(served.url, target, records, ADMIN)
    assert restored.status_code == 200, restored.text


@pytest.mark.slow
def test_an_admin_restore_of_a_whole_export_is_the_group_again(served: Served) -> None:
    source, first = seeded(served.service, corrected=True)
    target = group()
    assert send(served.url, target, export(served.url, source), ADMIN).status_code == 200
    assert [(e.uuid, e.title) for e in served.service.timeline(target, limit=50).episodes] == [
        (e.uuid, e.title) for e in served.service.timeline(source, limit=50).episodes
    ]
    assert served.service.episode_revisions(target, "s1", first) == served.service.episode_revisions(
        source, "s1", first
    )
    before = stored(served.url, target)
    assert send(served.url, target, export(served.url, source), ADMIN).status_code == 200  # again: nothing changes
    assert stored(served.url, target) == before


# -- (a) revisions -------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("forgery", ["resigned", "added", "rewritten"])
def test_a_an_episode_history_cannot_be_rewritten(served: Served, forgery: str) -> None:
    source, first = seeded(served.service, corrected=True)
    records = export(served.url, source)
    revisions = [i for i, r in enumerate(records) if r["type"] == "revision"]
    last = dict(records[revisions[-1]]["revision"])
    if forgery == "resigned":
        records[revisions[-1]] = {**records[revisions[-1]], "revision": {**last, "changed_by": "another-groups-key"}}
    elif forgery == "rewritten":
        records[revisions[-1]] = {**records[revisions[-1]], "revision": {**last, "title": "FORGED title"}}
    else:
        extra = {**records[revisions[-1]], "revision": {**last, "revision": last["revision"] + 1, "changed_by": "ops"}}
        records.insert(revisions[-1] + 1, extra)
    before = stored(served.url, source)
    history = served.service.episode_revisions(source, "s1", first)
    assert refused(send(served.url, source, recounted(records), WRITER), 403)["details"]["kind"] == "episode"
    error = refused(send(served.url, source, recounted(records), ADMIN), 409)
    assert error["details"]["ids"] == [first]
    assert served.service.episode_revisions(source, "s1", first) == history
    assert stored(served.url, source) == before


# -- (b) a message's other fields ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("producer_id", "someone-else"),
        ("produced_for_id", "nobody"),
        ("role", "assistant"),
        ("timestamp", "2001-01-01T00:00:00Z"),
        ("metadata", {"channel": "forged"}),
    ],
)
def test_b_a_stored_message_that_differs_in_any_field_is_a_409(served: Served, field: str, value: Any) -> None:
    source, _ = seeded(served.service)
    records = conversation(export(served.url, source))
    index = next(i for i, r in enumerate(records) if r["type"] == "message")
    record = records[index]["record"]
    records[index] = {**records[index], "record": {**record, "message": {**record["message"], field: value}}}
    before = stored(served.url, source)
    for key in (WRITER, ADMIN):
        error = refused(send(served.url, source, records, key), 409)
        assert error["details"]["ids"] == [record["message"]["id"]]
    assert stored(served.url, source) == before


# -- (c) a formed message set back to pending -----------------------------------------------------------------------


def test_c_a_formed_message_is_never_set_back_to_pending(served: Served) -> None:
    source, _ = seeded(served.service)
    before = stored(served.url, source)
    records = export(served.url, source)
    pending = [
        {**r, "record": {**r["record"], "state": "pending", "episode_id": None, "boundary_reason": None}}
        if r["type"] == "message"
        else r
        for r in records
    ]
    error = refused(send(served.url, source, pending, ADMIN), 409)  # a restore compares the processing state too
    assert len(error["details"]["ids"]) == 8
    assert send(served.url, source, conversation(pending), WRITER).status_code == 200  # what was said is equal
    assert stored(served.url, source) == before
    served.service.flush(source, "s1")
    cited = [m for e in served.service.timeline(source, limit=50).episodes for m in e.source_message_ids]
    assert len(cited) == len(set(cited)) == 8  # every message in exactly one episode


# -- (d) an invented episode ---------------------------------------------------------------------------------------


def test_d_an_invented_episode_citing_real_messages_is_refused(served: Served) -> None:
    source, first = seeded(served.service)
    records = export(served.url, source)
    index = next(i for i, r in enumerate(records) if r["type"] == "episode")
    invented = {
        **records[index]["episode"],
        "uuid": str(uuid.uuid4()),
        "title": "INVENTED meeting",
        "content": "INVENTED: they agreed to wire the money.",
        "generation": "llm",
    }
    forged = recounted([*records[: index + 1], {"type": "episode", "episode": invented}, *records[index + 1 :]])
    before = stored(served.url, source)
    for key in (WRITER, SCOPED):
        assert refused(send(served.url, source, forged, key), 403)["details"]["kind"] == "episode"
    assert stored(served.url, source) == before
    assert all("INVENTED" not in h.episode.content for h in served.service.search(source, "INVENTED money", k=10))


# -- (e) what a delete or a redaction erased -----------------------------------------------------------------------


@pytest.mark.slow
def test_e_an_older_export_never_brings_back_erased_text(served: Served, backend: str) -> None:
    service = served.service
    group_id = group()
    secret, gone = f"zqsecret{uuid.uuid4().hex[:8]}", f"zqgone{uuid.uuid4().hex[:8]}"
    two_episode_session(service, group_id, "keep", day=0)
    service.add_messages(group_id, "red", chat("r", 3, start=T0, marker=secret))
    (episode,) = service.flush(group_id, "red")
    service.correct_episode(group_id, "red", episode.uuid, content=f"They said {secret}.")
    service.add_messages(group_id, "del", chat("d", 3, start=T0, marker=gone))
    service.flush(group_id, "del")
    older = export(served.url, group_id)
    assert secret in json.dumps(older) and gone in json.dumps(older)

    assert HTTP.post(
        f"{served.url}/v1/groups/{group_id}/sessions/red/messages/r-0/redact", headers=auth(ADMIN), timeout=120
    ).json()["redacted"]
    deleted = HTTP.delete(f"{served.url}/v1/groups/{group_id}/sessions/del/messages/d-0", headers=auth(ADMIN))
    assert deleted.status_code == 200, deleted.text
    before = stored(served.url, group_id)
    assert secret not in json.dumps(before) and gone not in json.dumps(before)

    (said,) = [r for r in older if r["type"] == "message" and gone in r["record"]["message"]["content"]]
    renamed = {**said, "record": {**said["record"], "message": {**said["record"]["message"], "id": "fresh-id"}}}
    sessions = [r for r in older if r["type"] == "session" and r["session"]["session_id"] == "del"]
    renamed = recounted([older[0], *sessions, renamed])  # the erased text alone, under a new id
    attempts = [(older, ADMIN), (conversation(older), WRITER), (renamed, WRITER), (renamed, ADMIN)]
    for records, key in attempts:
        error = refused(send(served.url, group_id, records, key), 409)
        assert error["details"]["ids"], error
    assert stored(served.url, group_id) == before
    texts = json.dumps(before) + json.dumps(
        [r.model_dump(mode="json") for r in service.episode_revisions(group_id, "red", episode.uuid)]
    )
    texts += " ".join(h.episode.content for q in (secret, gone) for h in service.search(group_id, q, k=20))
    assert secret not in texts and gone not in texts
    if backend == "embedded":  # no byte of either text on disk (the erasure checks of tests/memory/test_erasure.py)
        folder = Path(service.settings.data_dir)
        files = [p for p in folder.rglob("*") if p.is_file()]
        found = [p for p in files if secret.encode() in p.read_bytes() or gone.encode() in p.read_bytes()]
        assert not found, found
