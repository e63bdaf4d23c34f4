"""Correcting memory over real HTTP (uvicorn), on both Chroma backends: PATCH an episode, its revisions,
redaction, the audit trail, recall filters on /search, /context and /timeline; changes signed with the
key's name (never its secret); the same roles as the rest of the API."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from helpers.builders import T0, turns
from helpers.http_client import HTTP

from api.facade import Epimem

KEYS = {
    "writer": {"key": "writer-0123456789abcdef", "groups": ["*"], "role": "write", "name": "support-bot"},
    "admin": {"key": "admin-0123456789abcdef0", "groups": ["*"], "role": "admin"},
    "reader": {"key": "reader-0123456789abcdef", "groups": ["*"], "role": "read"},
}
LINES = [
    ("ana", "We booked the cabin by the lake for the first week of July."),
    ("ben", "Great, I will bring the kayak and the fishing rods."),
    ("ana", "My locker code is {secret}, grab the tent from there."),
    ("ben", "Got it, I will pick up the tent on Friday."),
]


@pytest.fixture
def api(
    make_service: Callable[..., Epimem], serve: Callable[..., object], tmp_path: Path
) -> Callable[..., httpx.Response]:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps({"keys": list(KEYS.values())}))
    service = make_service(api_keys_file=keys_file)
    server = serve(service)

    def call(method: str, path: str, key: str = "admin", **options: object) -> httpx.Response:
        headers = {"authorization": f"Bearer {KEYS[key]['key']}"}
        return HTTP.request(method, f"{server.url}/v1{path}", headers=headers, timeout=300, **options)  # type: ignore[arg-type]

    return call


def _seed(api: Callable[..., httpx.Response], group: str, secret: str) -> str:
    lines = [(who, text.format(secret=secret)) for who, text in LINES]
    body = {"messages": turns(lines, start=T0, metadata={"channel": "email"})}
    assert api("POST", f"/groups/{group}/sessions/trip/messages", "writer", json=body).status_code == 200
    flushed = api("POST", f"/groups/{group}/sessions/trip/flush", "writer").json()["episodes"]
    assert len(flushed) == 1
    return str(flushed[0]["uuid"])


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["error"]["code"])


@pytest.mark.slow
def test_correct_redact_and_audit_over_http(api: Callable[..., httpx.Response], group_id: str) -> None:
    secret, fresh = f"zq{uuid.uuid4().hex[:10]}", f"zq{uuid.uuid4().hex[:10]}"
    episode_id = _seed(api, group_id, secret)
    episode_path = f"/groups/{group_id}/sessions/trip/episodes/{episode_id}"
    generated = api("GET", episode_path, "reader").json()["episode"]

    correction = {"content": f"Ben brings the canoe {fresh}.", "title": "Canoe trip", "reason": "canoe"}
    assert _error(api("PATCH", episode_path, "reader", json=correction), 403) == "forbidden"
    patched = api("PATCH", episode_path, "writer", json=correction)
    assert patched.status_code == 200, patched.text
    assert set(patched.json()) == {"episode"} and patched.json()["episode"]["title"] == "Canoe trip"
    hits = api("POST", f"/groups/{group_id}/search", "reader", json={"query": f"canoe {fresh}", "k": 3}).json()["hits"]
    assert hits[0]["episode"]["uuid"] == episode_id and fresh in hits[0]["episode"]["content"]
    timeline = api("GET", f"/groups/{group_id}/timeline", "reader").json()["episodes"]
    assert [e["title"] for e in timeline] == ["Canoe trip"]

    revisions = api("GET", episode_path + "/revisions", "reader").json()["revisions"]
    assert [(r["revision"], r["kind"], r["changed_by"]) for r in revisions] == [
        (0, "generated", "epimem"),
        (1, "correction", "support-bot"),
    ]
    assert revisions[0]["content"] == generated["content"] and revisions[1]["reason"] == "canoe"
    assert KEYS["writer"]["key"] not in json.dumps(revisions)

    for bad in ({}, {"title": ""}, {"title": "t", "extra": 1}, {"user_metadata": "x"}):
        assert _error(api("PATCH", episode_path, "writer", json=bad), 422) == "invalid_input"
    assert _error(api("PATCH", f"/groups/{group_id}/sessions/trip/episodes/nope", "writer", json={"title": "t"}), 404)

    redact = f"/groups/{group_id}/sessions/trip/messages/m2/redact"
    assert _error(api("POST", redact, "writer"), 403) == "forbidden"
    done = api("POST", redact, "admin")
    assert done.status_code == 200, done.text
    assert done.json()["redacted"] is True and done.json()["episodes"] == [episode_id]
    again = api("POST", redact, "admin", json={"replacement": "[gone]"})
    assert again.json()["redacted"] is False
    history = api("GET", f"/groups/{group_id}/sessions/trip/messages", "reader").json()["messages"]
    assert [m["content"] for m in history if m["id"] == "m2"] == ["[redacted]"]
    answers = [
        api("POST", f"/groups/{group_id}/search", "reader", json={"query": secret, "k": 10, "expand": True}).text,
        api("POST", f"/groups/{group_id}/context", "reader", json={"query": f"locker {secret}"}).text,
        api("GET", f"/groups/{group_id}/timeline", "reader").text,
        api("GET", episode_path + "/revisions", "reader").text,
        api("GET", f"/groups/{group_id}/export", "admin").text,
    ]
    assert all(secret not in answer for answer in answers)
    assert _error(api("POST", f"/groups/{group_id}/sessions/trip/messages/nope/redact", "admin"), 404)
    assert _error(api("POST", redact, "admin", json={"replacement": " "}), 422) == "invalid_input"

    audit = f"/groups/{group_id}/audit"
    assert _error(api("GET", audit, "writer"), 403) == "forbidden"
    entries = api("GET", audit, "admin").json()["entries"]
    admin_actor = entries[0]["actor"]
    assert [(e["action"], e["actor"]) for e in entries] == [
        ("redact", admin_actor),
        ("correct", "support-bot"),
        ("flush", "support-bot"),
        ("add", "support-bot"),
    ]
    assert admin_actor.startswith("key-") and KEYS["admin"]["key"] not in admin_actor
    assert secret not in json.dumps(entries) and fresh not in json.dumps(entries)
    first = api("GET", audit, "admin", params={"limit": 3}).json()
    rest = api("GET", audit, "admin", params={"limit": 3, "cursor": first["next_cursor"]}).json()
    assert [e["id"] for e in first["entries"] + rest["entries"]] == [e["id"] for e in entries]
    assert rest["next_cursor"] is None
    assert _error(api("GET", audit, "admin", params={"limit": 0}), 422) == "invalid_input"
    assert _error(api("GET", audit, "admin", params={"cursor": "$where"}), 422) == "invalid_input"
    assert _error(api("GET", "/groups/no-such-group-x/audit", "admin"), 404) == "not_found"


@pytest.mark.slow
def test_filters_over_http(api: Callable[..., httpx.Response], group_id: str) -> None:
    _seed(api, group_id, "4411")
    search = f"/groups/{group_id}/search"
    body = {"query": "kayak tent cabin", "k": 5, "expand": True, "filter": {"speakers": ["ben"]}}
    hits = api("POST", search, "reader", json=body).json()["hits"]
    assert hits and all(m["producer_id"] == "ben" for h in hits for m in h["messages"])
    asked = {"query": "kayak tent cabin", "filter": {"speakers": ["ben"]}}
    context = api("POST", f"/groups/{group_id}/context", "reader", json=asked).json()
    assert context["citations"] and {m for c in context["citations"] for m in c["message_ids"]} <= {"m1", "m3"}
    assert "ana:" not in context["text"]
    passing = api(
        "GET", f"/groups/{group_id}/timeline", "reader", params={"filter": '{"metadata": {"channel": "email"}}'}
    )
    assert len(passing.json()["episodes"]) == 1
    none = api("GET", f"/groups/{group_id}/timeline", "reader", params={"filter": '{"metadata": {"channel": "sms"}}'})
    assert none.json()["episodes"] == []
    for bad in (
        {"metadata": {"$where": "1"}},
        {"metadata": {"": 1}},
        {"metadata": {"k" * 101: 1}},
        {"metadata": {"k": {"$ne": 1}}},
        {"speakers": "ben"},
        {"where": {}},
    ):
        assert _error(api("POST", search, "reader", json={"query": "x", "filter": bad}), 422) == "invalid_input"
        assert _error(api("POST", f"/groups/{group_id}/context", "reader", json={"query": "x", "filter": bad}), 422)
        timeline = api("GET", f"/groups/{group_id}/timeline", "reader", params={"filter": json.dumps(bad)})
        assert _error(timeline, 422) == "invalid_input"
    assert _error(api("GET", f"/groups/{group_id}/timeline", "reader", params={"filter": "{not json"}), 422)


def test_the_thin_client_corrects_redacts_filters_and_reads_the_audit(
    make_service: Callable[..., Epimem], serve: Callable[..., object], group_id: str
) -> None:
    from epimem_client import EpimemClient

    server = serve(make_service())
    with EpimemClient(server.url) as memory:  # type: ignore[attr-defined]
        memory.add_messages(group_id, "trip", turns([(w, t.format(secret="4411")) for w, t in LINES], start=T0))
        (episode,) = memory.flush(group_id, "trip")
        corrected = memory.correct_episode(group_id, "trip", episode.uuid, title="Canoe trip", reason="canoe")
        assert corrected.title == "Canoe trip"
        revisions = memory.episode_revisions(group_id, "trip", episode.uuid)
        assert [(r.kind, r.changed_by) for r in revisions] == [("generated", "epimem"), ("correction", "local")]
        receipt = memory.redact_message(group_id, "trip", "m2", replacement="[removed]")
        assert receipt.redacted and receipt.episodes == [episode.uuid]
        assert [m.content for m in memory.history(group_id, "trip") if m.id == "m2"] == ["[removed]"]
        hits = memory.search(group_id, "kayak", k=3, expand=True, filter={"speakers": ["ben"]})
        assert hits and {m.producer_id for h in hits for m in h.messages or []} == {"ben"}
        assert memory.timeline(group_id, filter={"roles": ["assistant"]}).episodes == []
        assert len(memory.timeline(group_id, filter={"speakers": ["ana"]}).episodes) == 1
        page = memory.audit(group_id, limit=2)
        assert [e.action for e in page.entries] == ["redact", "correct"] and page.next_cursor
