"""Keys managed live over real HTTP (uvicorn), on both Chroma backends: made, listed, rotated and revoked by an
admin of every group, working or refused at once with no restart; names in the audit trail; expiry; secrets
only as salted hashes (no byte of a secret in the data folder); the keys file as the store's seed; the store
across restarts; hostile input and callers; no secret in any log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, turns
from helpers.http_client import HTTP
from helpers.servers import AppServer

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.timeutil import utc_now

ROOT_KEY = "root-0123456789abcdef-seed"
TEAM_ADMIN = "team-admin-0123456789abcd"
SEED = {
    "keys": [
        {"key": ROOT_KEY, "groups": ["*"], "role": "admin", "name": "ops"},
        {"key": TEAM_ADMIN, "groups": ["team-*"], "role": "admin"},
    ]
}


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, method: str, path: str, key: str | None = ROOT_KEY, **options: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        headers.update(options.pop("headers", {}))
        return HTTP.request(method, f"{self.url}{path}", headers=headers, timeout=120, **options)


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(SEED))
    return path


@pytest.fixture
def server(make_service: Callable[..., Epimem], serve: Callable[..., Any], keys_file: Path) -> Iterator[Any]:
    yield serve(make_service(api_keys_file=keys_file))


@pytest.fixture
def api(server: Any) -> Api:
    return Api(server.url)


def _add(api: Api, key: str | None, group: str, ids: list[str], session: str = "s1") -> httpx.Response:
    messages = turns([("ana", f"Message {i} about the lake cabin.") for i in ids], start=T0)
    for message, message_id in zip(messages, ids, strict=True):
        message["id"] = message_id
    return api("POST", f"/v1/groups/{group}/sessions/{session}/messages", key, json={"messages": messages})


def test_a_key_made_over_http_works_at_once_and_is_listed_without_its_secret(api: Api, group_id: str) -> None:
    made = api("POST", "/v1/keys", json={"name": f"support-bot-{group_id}", "groups": [group_id], "role": "write"})
    assert made.status_code == 201, made.text
    body = made.json()
    secret, key_id = body["key"], body["id"]
    assert key_id.startswith("key-") and secret.startswith("epm_") and len(secret) > 40
    assert body["name"] == f"support-bot-{group_id}" and body["status"] == "active" and body["source"] == "api"
    assert _add(api, secret, group_id, ["m1"]).status_code == 200
    assert _add(api, secret, "another-group", ["m1"]).status_code == 403

    listed = api("GET", "/v1/keys")
    assert listed.status_code == 200
    assert secret not in listed.text and "secret_hash" not in listed.text and "scrypt" not in listed.text
    mine = {k["id"]: k for k in listed.json()["keys"]}[key_id]
    assert mine["usage"] == {"messages_today": 1} and mine["groups"] == [group_id]
    assert {k["name"] for k in listed.json()["keys"]} >= {"ops", f"support-bot-{group_id}"}  # the file's keys, seeded
    assert api("GET", f"/v1/keys/{key_id}").json()["name"] == f"support-bot-{group_id}"


@pytest.mark.slow
def test_revoked_and_rotated_secrets_are_refused_at_once(api: Api, group_id: str) -> None:
    made = api("POST", "/v1/keys", json={"name": f"rotating-{group_id}", "groups": [group_id], "role": "write"}).json()
    old = made["key"]
    rotated = api("POST", f"/v1/keys/{made['id']}/rotate")
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["key"]
    assert new != old and rotated.json()["id"] == made["id"]
    refused = _add(api, old, group_id, ["m1"])
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert _add(api, new, group_id, ["m1"]).status_code == 200

    revoked = api("DELETE", f"/v1/keys/{made['id']}")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    answer = _add(api, new, group_id, ["m2"])
    assert answer.status_code == 401 and "revoked" in answer.json()["error"]["message"]
    assert api("GET", f"/v1/groups/{group_id}/sessions", new).status_code == 401
    assert api("DELETE", f"/v1/keys/{made['id']}").status_code == 200  # twice: no-op
    assert api("POST", f"/v1/keys/{made['id']}/rotate").status_code == 409  # a revoked key stays revoked
    again = api("POST", "/v1/keys", json={"name": f"rotating-{group_id}", "groups": [group_id], "role": "write"})
    assert again.status_code == 201  # the name is free again once its key is revoked


@pytest.mark.slow
def test_the_audit_trail_names_the_key_and_expiry_refuses_it(server: Any, api: Api, group_id: str) -> None:
    soon = (utc_now() + timedelta(days=1)).isoformat()
    made = api(
        "POST",
        "/v1/keys",
        json={"name": f"ops-team-{group_id}", "groups": [group_id], "role": "admin", "expires_at": soon},
    )
    secret = made.json()["key"]
    assert _add(api, secret, group_id, ["m1", "m2"]).status_code == 200
    redacted = api("POST", f"/v1/groups/{group_id}/sessions/s1/messages/m1/redact", secret, json={})
    assert redacted.status_code == 200, redacted.text
    audit = api("GET", f"/v1/groups/{group_id}/audit", secret).json()
    assert audit["entries"] and {entry["actor"] for entry in audit["entries"]} == {f"ops-team-{group_id}"}

    keys = server.app.state.keys
    keys.clock = lambda: utc_now() + timedelta(days=2)  # a day past the expiry
    try:
        answer = api("GET", f"/v1/groups/{group_id}/sessions", secret)
        assert answer.status_code == 401 and "expired" in answer.json()["error"]["message"]
        listed = {k["id"]: k for k in api("GET", "/v1/keys").json()["keys"]}
        assert listed[made.json()["id"]]["expires_at"] is not None
    finally:
        keys.clock = utc_now


def test_only_an_admin_of_every_group_manages_keys(api: Api, group_id: str) -> None:
    body = {"name": "x", "groups": ["team-a"], "role": "read"}
    writer = api("POST", "/v1/keys", json={"name": f"writer-all-{group_id}", "groups": ["*"], "role": "write"}).json()[
        "key"
    ]
    for key in (TEAM_ADMIN, writer):
        for method, path, payload in (
            ("POST", "/v1/keys", body),
            ("GET", "/v1/keys", None),
            ("GET", "/v1/usage", None),
            ("PUT", "/v1/groups/team-a/limits", {"messages_per_day": 5}),
        ):
            answer = api(method, path, key, json=payload) if payload is not None else api(method, path, key)
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden", (key, path)
    assert api("POST", "/v1/keys", None, json=body).status_code == 401
    assert api("GET", "/v1/groups/team-a/usage", TEAM_ADMIN).status_code == 200  # a group's admin sees its use


BAD_BODIES: list[Any] = [
    {"name": 5, "groups": ["a"], "role": "read"},
    {"name": "", "groups": ["a"], "role": "read"},
    {"name": "a\nb", "groups": ["a"], "role": "read"},
    {"name": "x" * 101, "groups": ["a"], "role": "read"},
    {"name": "n", "groups": "a", "role": "read"},
    {"name": "n", "groups": [], "role": "read"},
    {"name": "n", "groups": ["a*b"], "role": "read"},
    {"name": "n", "groups": ["g"] * 101, "role": "read"},
    {"name": "n", "groups": ["a"], "role": "root"},
    {"name": "n", "groups": ["a"], "role": "read", "expires_at": "yesterday"},
    {"name": "n", "groups": ["a"], "role": "read", "expires_at": "2001-01-01T00:00:00Z"},
    {"name": "n", "groups": ["a"], "role": "read", "limits": {"messages_per_day": "10"}},
    {"name": "n", "groups": ["a"], "role": "read", "limits": {"messages_per_day": 0}},
    {"name": "n", "groups": ["a"], "role": "read", "limits": {"messages_per_day": 1.5}},
    {"name": "n", "groups": ["a"], "role": "read", "limits": {"requests_per_second": True}},
    {"name": "n", "groups": ["a"], "role": "read", "limits": {"requests_per_second": -1}},
    {"name": "n", "groups": ["a"], "role": "read", "limits": {"stored_chars": 5}},
    {"name": "n", "groups": ["a"], "role": "read", "secret": "mine"},
    {"name": "n", "groups": ["a"], "role": "read", "id": "key-000000000000"},
    ["not", "an", "object"],
]


def test_bad_key_bodies_are_422_and_make_nothing(api: Api) -> None:
    before = len(api("GET", "/v1/keys").json()["keys"])
    for body in BAD_BODIES:
        answer = api("POST", "/v1/keys", json=body)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_input", (body, answer.text)
    assert len(api("GET", "/v1/keys").json()["keys"]) == before


def test_unknown_ids_huge_bodies_and_duplicate_names(api: Api, group_id: str) -> None:
    assert api("GET", "/v1/keys/key-0123456789ab").status_code == 404
    assert api("DELETE", "/v1/keys/key-0123456789ab").status_code == 404
    assert api("POST", "/v1/keys/key-0123456789ab/rotate").status_code == 404
    assert api("PUT", "/v1/keys/key-0123456789ab/limits", json={}).status_code == 404
    for bad in ("nope", "key-XYZ", "key-0123456789abc", "key-0123456789AB", "key-0123456789ab%00"):
        answer = api("DELETE", f"/v1/keys/{bad}")
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_input", bad
    huge = {"name": "big", "groups": ["a" * 400] * (Settings().max_body_bytes // 400 + 1), "role": "read"}
    assert api("POST", "/v1/keys", json=huge).status_code == 413
    assert (
        api("POST", "/v1/keys", json={"name": f"twin-{group_id}", "groups": ["a"], "role": "read"}).status_code == 201
    )
    assert (
        api("POST", "/v1/keys", json={"name": f"twin-{group_id}", "groups": ["b"], "role": "read"}).status_code == 409
    )
    assert (
        api("POST", "/v1/keys", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    )


def test_no_byte_of_a_secret_is_stored_or_logged(
    api: Api,
    server: Any,
    group_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    caplog.set_level(logging.DEBUG)
    made = api("POST", "/v1/keys", json={"name": f"scanned-{group_id}", "groups": [group_id], "role": "write"}).json()
    secret = made["key"]
    assert _add(api, secret, group_id, ["m1"]).status_code == 200
    rotated = api("POST", f"/v1/keys/{made['id']}/rotate").json()["key"]
    assert _add(api, secret, group_id, ["m2"]).status_code == 401
    assert api("GET", "/v1/groups/other/sessions", rotated).status_code == 403
    folders = [tmp_path]  # the data folder and what lies beside it (the keys file holds the seed's secrets only)
    if server.service.settings.chroma_host is not None:
        folders.append(request.getfixturevalue("chroma_server").path)
    # epm_<key id>_<random part>: the random part (token_urlsafe, which may hold "_" itself) stored nowhere either
    for needle in (secret, rotated, secret.split("_", 2)[2], rotated.split("_", 2)[2]):
        for folder in folders:
            for path in folder.rglob("*"):
                if path.is_file():
                    assert needle.encode() not in path.read_bytes(), path
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert secret not in logged and rotated not in logged and ROOT_KEY not in logged


@pytest.mark.slow
def test_the_keys_file_seeds_the_store_and_the_store_outlives_it(
    make_service: Callable[..., Epimem], tmp_path: Path, group_id: str
) -> None:
    root, team = f"root-{group_id}-secret", f"team-{group_id}-secret"  # this test's own: it revokes one
    keys_file = tmp_path / "own-keys.json"
    keys_file.write_text(
        json.dumps(
            {
                "keys": [
                    {"key": root, "groups": ["*"], "role": "admin", "name": f"ops-{group_id}"},
                    {"key": team, "groups": [f"{group_id}*"], "role": "admin"},
                ]
            }
        )
    )
    first = make_service(api_keys_file=keys_file)
    with AppServer(first) as started:
        api = Api(started.url)
        listed = {k["name"]: k for k in api("GET", "/v1/keys", root).json()["keys"]}
        assert listed[f"ops-{group_id}"]["source"] == "file"
        made = api("POST", "/v1/keys", root, json={"name": f"kept-{group_id}", "groups": [group_id], "role": "write"})
        team_key = [k for k in listed.values() if k["groups"] == [f"{group_id}*"]][0]
        assert team_key["name"] == team_key["id"]  # an unnamed file key is named by its id, as the audit trail did
    first.close()
    # The file is gone: keys come from the store alone (EPIMEM_API_KEYS_STORE), the file's seed included.
    second = make_service(api_keys_store=True)
    with AppServer(second) as again:
        api = Api(again.url)
        assert _add(api, made.json()["key"], group_id, ["m1"]).status_code == 200
        assert api("GET", "/v1/keys", root).status_code == 200
        assert _add(api, "not-a-key-at-all-0123", group_id, ["m2"]).status_code == 401
        assert _add(api, None, group_id, ["m2"]).status_code == 401
    second.close()
    # A changed file entry updates its key (a file key neither rotated nor revoked); revoking it is the store's.
    keys_file.write_text(json.dumps({"keys": [{"key": team, "groups": [f"{group_id}*"], "role": "read"}]}))
    third = make_service(api_keys_file=keys_file)
    with AppServer(third) as last:
        api = Api(last.url)
        assert api("DELETE", f"/v1/groups/{group_id}", team).status_code == 403  # now read only
        assert api("GET", f"/v1/groups/{group_id}/sessions", team).status_code == 200
        assert api("DELETE", f"/v1/keys/{team_key['id']}", root).status_code == 200
        assert api("GET", f"/v1/groups/{group_id}/sessions", team).status_code == 401


def test_local_mode_ignores_the_store_and_can_make_the_first_key(
    make_service: Callable[..., Epimem], group_id: str
) -> None:
    service = make_service()
    with AppServer(service) as local:
        api = Api(local.url)
        made = api("POST", "/v1/keys", None, json={"name": f"first-admin-{group_id}", "groups": ["*"], "role": "admin"})
        assert made.status_code == 201
        assert _add(api, None, group_id, ["m1"]).status_code == 200  # still local mode until restarted with the store
    app = create_app(service, service.settings.model_copy(update={"api_keys_store": True}))
    with AppServer(app) as keyed:
        api = Api(keyed.url)
        assert _add(api, None, group_id, ["m2"]).status_code == 401
        assert _add(api, made.json()["key"], group_id, ["m2"]).status_code == 200


def test_serve_with_the_key_store_alone_is_not_local_mode(tmp_path: Path) -> None:
    from api.cli.startup import check_keys
    from api.settings import Settings

    assert not check_keys(Settings(data_dir=tmp_path)).enabled  # local mode: this machine only
    assert check_keys(Settings(data_dir=tmp_path, api_keys_store=True)).enabled  # may serve other machines
