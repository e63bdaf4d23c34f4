"""API keys scoped to groups: every route of the app is tried with no key, an unknown key, a key of
another group and a key with too small a role. Routes are read from the app itself, so a new route
cannot be forgotten."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from api.auth import KeyRing
from api.facade import Epimem
from api.logs import JsonFormatter
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.errors import InvalidInputError

KEYS = {
    "admin-a": {"key": "admin-a-0123456789abcdef", "groups": ["team-a", "proj-*"], "role": "admin"},
    "write-a": {"key": "write-a-0123456789abcdef", "groups": ["team-a"], "role": "write"},
    "read-a": {"key": "read-a-0123456789abcdef0", "groups": ["team-a"], "role": "read"},
    "admin-b": {"key": "admin-b-0123456789abcdef", "groups": ["team-b"], "role": "admin"},
    "admin-all": {"key": "admin-all-0123456789abcd", "groups": ["*"], "role": "admin"},
}
# Routes that answer without a key, on purpose: liveness, readiness and the API description.
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")}
PUBLIC |= {("GET", "/docs/oauth2-redirect"), ("GET", "/docs-assets")}  # and Swagger UI's / ReDoc's files
# Where to go (GET /) and the explorer's static files: no memory in them, every datum comes through /v1 with a key.
PUBLIC |= {("GET", "/"), ("GET", "/ui")}
NEEDS = {"read": 1, "write": 2, "admin": 3}


def flatten(routes: list[Any]) -> Iterator[Any]:
    """FastAPI keeps included routers as nodes (``original_router``); walk into them."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from flatten(included.routes)
        else:
            yield route


def app_routes() -> list[tuple[str, str, str]]:
    """(method, path template, role needed) for every route of the app."""
    app = create_app(settings=Settings(api_keys_file=None))
    found = []
    for route in flatten(app.routes):
        if getattr(route, "path", None) == "/mcp":  # MCP's own key and group checks: tests/api/test_mcp.py
            continue
        methods = sorted(getattr(route, "methods", None) or ["GET"])
        for method in methods:
            if method == "HEAD":
                continue
            if (method, route.path) in PUBLIC:
                found.append((method, route.path, "public"))
            else:
                assert isinstance(route, APIRoute), f"{method} {route.path} is not an API route and not public"
                found.append((method, route.path, required_role(method, route.path)))
    return found


# Routes about every group or the whole deployment: an admin key for '*' only (metrics, keys, limits, usage,
# webhooks, backups and restores).
SERVER_WIDE = {
    "/metrics",
    "/v1/webhooks",
    "/v1/webhooks/{subscription_id}",
    "/v1/webhooks/{subscription_id}/deliveries",
    "/v1/backup",
    "/v1/restore",
}


def server_wide(path: str) -> bool:
    return path in SERVER_WIDE or path.startswith(("/v1/keys", "/v1/usage")) or path.endswith("/limits")


def required_role(method: str, path: str) -> str:
    """The documented role table (README): deletes, redaction, audit, export, usage, changing retention or sweeping,
    and what is about every group need admin; writes (corrections too) need write."""
    if method == "DELETE" or path.endswith(("/export", "/redact", "/audit", "/usage", "/sweep")) or server_wide(path):
        return "admin"
    if method == "PUT" and path.endswith("/retention"):
        return "admin"
    if method in ("POST", "PUT", "PATCH") and not path.endswith(("/search", "/context")):
        return "write"
    return "read"


ROUTES = app_routes()
GROUP_ROUTES = [r for r in ROUTES if "{group_id}" in r[1]]
PROTECTED = [r for r in ROUTES if r[2] != "public"]


def url(path: str, group_id: str) -> str:
    values = {
        "group_id": group_id,
        "session_id": "s1",
        "episode_id": "e1",
        "message_id": "m1",
        "key_id": "key-0123456789ab",
        "subscription_id": "ab12",
    }
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    """No route here touches the store before authorization, so one embedded store is enough."""
    folder = tmp_path_factory.mktemp("auth")
    keys_file = folder / "keys.json"
    keys_file.write_text(json.dumps({"keys": list(KEYS.values())}))
    service = Epimem.from_settings(
        Settings(data_dir=folder / "data", api_keys_file=keys_file), background=False, embedder=embedder
    )
    with TestClient(create_app(service)) as client:
        yield client
    service.close()


def call(client: TestClient, method: str, path: str, group_id: str, key: str | None) -> tuple[int, dict]:
    headers = {"authorization": f"Bearer {KEYS[key]['key']}"} if key else {}
    if method in ("POST", "PUT", "PATCH"):
        response = client.request(method, url(path, group_id), headers=headers, content=b"{}")
    else:
        response = client.request(method, url(path, group_id), headers=headers)
    body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    return response.status_code, body


def test_the_route_table_is_what_the_readme_documents() -> None:
    assert len(PROTECTED) >= 20
    assert {r[2] for r in PROTECTED} == {"read", "write", "admin"}
    # Every protected route is scoped to a group, but the server-wide ones (an admin of '*') and the caller's own
    # view (its role, the groups it may read: tests/api/test_api_explorer_routes.py checks that nothing outside its
    # groups is listed).
    unscoped = {r[1] for r in PROTECTED if "{group_id}" not in r[1]}
    assert {path for path in unscoped if not server_wide(path)} == {"/v1/groups", "/v1/auth/whoami"}
    assert {"/metrics", "/v1/keys", "/v1/keys/{key_id}", "/v1/usage"} | SERVER_WIDE <= unscoped


@pytest.mark.parametrize(("method", "path", "role"), PROTECTED, ids=[f"{m} {p}" for m, p, _ in PROTECTED])
def test_no_key_or_unknown_key_is_401(keyed: TestClient, method: str, path: str, role: str) -> None:
    status, body = call(keyed, method, path, "team-a", None)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    with_bad = keyed.request(method, url(path, "team-a"), headers={"authorization": "Bearer not-a-key-at-all"})
    assert with_bad.status_code == 401
    basic = keyed.request(method, url(path, "team-a"), headers={"authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status_code == 401


@pytest.mark.parametrize(("method", "path", "role"), GROUP_ROUTES, ids=[f"{m} {p}" for m, p, _ in GROUP_ROUTES])
def test_a_key_of_another_group_is_403_and_reveals_nothing(
    keyed: TestClient, method: str, path: str, role: str
) -> None:
    # team-a holds data; team-nobody does not exist: the answers must be identical.
    keyed.post(
        "/v1/groups/team-a/sessions/s1/messages",
        json={"messages": [{"id": "m1", "content": "secret plans"}]},
        headers={"authorization": f"Bearer {KEYS['admin-a']['key']}"},
    )
    existing = call(keyed, method, path, "team-a", "admin-b")
    missing = call(keyed, method, path, "team-nobody", "admin-b")
    assert existing[0] == 403 and existing[1]["error"]["code"] == "forbidden"
    assert existing == missing


@pytest.mark.parametrize(("method", "path", "role"), PROTECTED, ids=[f"{m} {p}" for m, p, _ in PROTECTED])
def test_roles(keyed: TestClient, method: str, path: str, role: str) -> None:
    for key, level in (("read-a", 1), ("write-a", 2), ("admin-a", 3)):
        status, body = call(keyed, method, path, "team-a", key)
        if level < NEEDS[role] or server_wide(path):  # every group's figures, keys, limits: a key for '*' only
            assert status == 403 and body["error"]["code"] == "forbidden", (key, status, body)
        else:
            assert status not in (401, 403), (key, status, body)


def test_patterns_and_the_wildcard(keyed: TestClient) -> None:
    def status(group_id: str, key: str) -> int:
        return call(keyed, "GET", "/v1/groups/{group_id}/sessions", group_id, key)[0]

    assert status("proj-x", "admin-a") == 200 and status("proj-", "admin-a") == 200
    assert status("proj", "admin-a") == 403 and status("team-ab", "admin-a") == 403
    assert status("anything", "admin-all") == 200
    assert status("team-a", "read-a") == 200 and status("team-b", "read-a") == 403


def test_keys_and_content_are_never_logged(keyed: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret_content = "my-bank-pin-is-8675309"
    key = KEYS["write-a"]["key"]
    headers = {"authorization": f"Bearer {key}", "x-request-id": "req-42"}
    response = keyed.post(
        "/v1/groups/team-a/sessions/s9/messages",
        json={"messages": [{"id": "x1", "content": secret_content}]},
        headers=headers,
    )
    assert response.status_code == 200
    keyed.get("/v1/groups/team-b/sessions", headers=headers)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    access = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "epimem.access"]
    assert [(line["request_id"], line["route"], line["status"]) for line in access] == [
        ("req-42", "/v1/groups/{group_id}/sessions/{session_id}/messages", 200),
        ("req-42", "/v1/groups/{group_id}/sessions", 403),
    ]
    assert key not in logged and secret_content not in logged  # ... without the key or the content


def test_bad_key_files_fail_fast(tmp_path: Path) -> None:
    for content in (
        "not json",
        json.dumps({"keys": [{"key": "short", "groups": ["a"], "role": "read"}]}),
        json.dumps({"keys": [{"key": "long-enough-secret-key", "groups": ["a"], "role": "root"}]}),
        json.dumps({"keys": [{"key": "long-enough-secret-key", "groups": ["a*b"], "role": "read"}]}),
    ):
        path = tmp_path / "keys.json"
        path.write_text(content)
        with pytest.raises(InvalidInputError) as caught:
            create_app(settings=Settings(api_keys_file=path))
        assert "long-enough-secret-key" not in str(caught.value)
    with pytest.raises(InvalidInputError):
        KeyRing.from_file(tmp_path / "missing.json")


def test_local_mode_allows_everything(tmp_path: Path) -> None:
    ring = KeyRing.from_file(None)
    assert not ring.enabled
