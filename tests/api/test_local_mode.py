"""Local mode and keys: a web page cannot read or write a local epimem (the exact requests a browser
sends, on a real uvicorn socket), ``create_app`` itself refuses non-loopback clients with no keys,
keys are checked before the body is read, the keys file refuses unknown fields and repeated
secrets, refuses to start with no usable key, honours ``expires``, and ``/metrics`` needs a key for every group."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers.docs_blocks import blocks
from helpers.http_client import HTTP
from helpers.paths import DOCS
from helpers.servers import AppServer

from api.auth import KeyRing, Role
from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.errors import InvalidInputError

EXPORT_HEAD = '{"type": "header", "format": "epimem", "version": 1}\n'
ADMIN_ALL, ADMIN_A, WRITER_A = "admin-every-group-0001", "admin-group-a-only-0002", "writer-group-a-only-03"


@pytest.fixture(scope="module")
def service(embedded_service: Epimem) -> Epimem:
    return embedded_service


def _browser(port: int, origin: str, host: str | None = None) -> dict[str, str]:
    """The headers Chromium sends with fetch(url, {method: "POST", mode: "no-cors", body: text})."""
    return {
        "Host": host or f"127.0.0.1:{port}",
        "Origin": origin,
        "Content-Type": "text/plain;charset=UTF-8",
        "Accept": "*/*",
        "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "no-cors",
        "Sec-Fetch-Dest": "empty",
        "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0",
    }


def _export_of(service: Epimem) -> bytes:
    service.add_messages("source", "s", [{"id": "m1", "content": "A memory the page tries to plant."}])
    service.flush("source", "s")
    return "".join(service.export_group("source")).encode()


def test_a_web_page_cannot_write_or_read_a_local_epimem(service: Epimem, serve: Callable[..., AppServer]) -> None:
    server = serve(service)
    url = f"http://127.0.0.1:{server.port}"
    body = _export_of(service)
    planted = HTTP.post(
        f"{url}/v1/groups/planted/import", content=body, headers=_browser(server.port, "https://evil.example")
    )
    assert planted.status_code == 403 and planted.json()["error"]["code"] == "forbidden"
    assert planted.headers["X-Request-ID"]
    # The same request without Origin (a client that hides it) is still refused: text/plain is no JSON.
    no_origin = {k: v for k, v in _browser(server.port, "x").items() if k != "Origin"}
    assert HTTP.post(f"{url}/v1/groups/planted/import", content=body, headers=no_origin).status_code == 415
    form = dict(no_origin, **{"Content-Type": "application/x-www-form-urlencoded"})
    assert HTTP.post(f"{url}/v1/groups/planted/sessions/s/flush", content=b"a=1", headers=form).status_code == 415
    assert service.list_sessions("planted") == []
    # A page cannot read either: GET with a foreign Origin (a CORS fetch) or a rebound Host.
    read = f"{url}/v1/groups/source/timeline"
    assert HTTP.get(read, headers={"Origin": "https://evil.example"}).status_code == 403
    assert HTTP.get(read, headers={"Origin": "null"}).status_code == 403
    rebound = HTTP.get(read, headers={"Host": f"evil.example:{server.port}"})
    assert rebound.status_code == 403 and "DNS rebinding" in rebound.json()["error"]["message"]
    for path in ("/ui", "/mcp", "/docs"):  # every path, not only /v1
        assert HTTP.get(f"{url}{path}", headers={"Host": "rebind.example"}).status_code == 403


def test_local_clients_and_json_types_still_work(service: Epimem, serve: Callable[..., AppServer]) -> None:
    server = serve(service)
    url = f"http://127.0.0.1:{server.port}"
    body = _export_of(service)
    same_origin = {"Origin": url, "Content-Type": "application/x-ndjson"}
    imported = HTTP.post(f"{url}/v1/groups/copied/import", content=body, headers=same_origin)
    assert imported.status_code == 200, imported.text
    message = json.dumps({"messages": [{"id": "j1", "content": "typed json with a charset"}]})
    for host, content_type in (("localhost", "application/json; charset=utf-8"), ("[::1]", "application/json")):
        headers = {"Host": f"{host}:{server.port}", "Origin": f"http://localhost:{server.port}"}
        sent = HTTP.post(
            f"{url}/v1/groups/copied/sessions/t/messages",
            content=message,
            headers={**headers, "Content-Type": content_type},
        )
        assert sent.status_code == 200, sent.text
    assert HTTP.get(f"{url}/v1/groups/copied/sessions/t/messages").json()["messages"][0]["id"] == "j1"


def _outward_address() -> str | None:
    """An address of this machine that is not loopback (connecting to it, the peer is not loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_create_app_with_no_keys_serves_only_this_machine(service: Epimem, serve: Callable[..., AppServer]) -> None:
    remote = TestClient(create_app(service), client=("203.0.113.9", 40000), base_url="http://127.0.0.1")
    refused = remote.get("/v1/groups/source/timeline")
    assert refused.status_code == 403 and "local mode" in refused.json()["error"]["message"]
    address = _outward_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to connect from")
    server = serve(service, host="0.0.0.0")
    assert HTTP.get(f"http://{address}:{server.port}/v1/groups/source/timeline").status_code == 403
    assert HTTP.get(f"http://127.0.0.1:{server.port}/v1/groups/source/timeline").status_code == 200


def _keys_file(tmp_path: Path, keys: list[dict]) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return path


def _keyed(service: Epimem, tmp_path: Path, keys: list[dict]) -> TestClient:
    settings = Settings(**{**service.settings.model_dump(), "api_keys_file": _keys_file(tmp_path, keys)})
    return TestClient(create_app(service, settings))


def test_keys_are_checked_before_the_body_is_read(service: Epimem, tmp_path: Path) -> None:
    client = _keyed(service, tmp_path, [{"key": WRITER_A, "groups": ["a"], "role": "write"}])
    junk = b"{" * (Settings().max_body_bytes + 10)  # malformed, and over the body limit
    path = "/v1/groups/a/sessions/s/messages"
    keyless = client.post(path, content=junk, headers={"content-type": "application/json"})
    assert keyless.status_code == 401, keyless.text
    wrong = client.post(
        path, content=junk, headers={"content-type": "application/json", "authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    keyed = {"content-type": "application/json", "authorization": f"Bearer {WRITER_A}"}
    assert client.post(path, content=junk, headers=keyed).status_code == 413
    assert client.post(path, content=b"{", headers=keyed).status_code == 422
    plain = client.post(path, content=b"{}", headers={**keyed, "content-type": "text/plain"})
    assert plain.status_code == 415  # with keys too: state changes take JSON only


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ([{"key": ADMIN_ALL, "groups": ["*"], "role": "admin", "scopes": ["x"]}], "keys.0.scopes"),
        (
            [{"key": ADMIN_ALL, "groups": ["*"], "role": "admin"}, {"key": ADMIN_ALL, "groups": ["a"], "role": "read"}],
            "same key",
        ),
        ([{"key": ADMIN_ALL, "groups": ["*"], "role": "admin", "expires": "next tuesday-ish"}], "keys.0.expires"),
    ],
)
def test_a_keys_file_with_unknown_fields_or_a_repeated_secret_is_refused(
    service: Epimem, tmp_path: Path, keys: list[dict], problem: str
) -> None:
    settings = Settings(**{**service.settings.model_dump(), "api_keys_file": _keys_file(tmp_path, keys)})
    with pytest.raises(InvalidInputError) as refused:
        create_app(service, settings)
    assert problem in refused.value.message and ADMIN_ALL not in refused.value.message


def test_expired_keys_are_refused(service: Epimem, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    client = _keyed(
        service,
        tmp_path,
        [
            {"key": ADMIN_ALL, "groups": ["*"], "role": "admin", "expires": (now - timedelta(seconds=1)).isoformat()},
            {"key": ADMIN_A, "groups": ["a"], "role": "admin", "expires": (now + timedelta(days=1)).isoformat()},
        ],
    )
    expired = client.get("/v1/groups/a/sessions", headers={"authorization": f"Bearer {ADMIN_ALL}"})
    assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"]
    assert client.get("/v1/groups/a/sessions", headers={"authorization": f"Bearer {ADMIN_A}"}).status_code == 200


def test_metrics_need_a_key_for_every_group(service: Epimem, tmp_path: Path) -> None:
    client = _keyed(
        service,
        tmp_path,
        [{"key": ADMIN_ALL, "groups": ["*"], "role": "admin"}, {"key": ADMIN_A, "groups": ["a"], "role": "admin"}],
    )
    scoped = client.get("/metrics", headers={"authorization": f"Bearer {ADMIN_A}"})
    assert scoped.status_code == 403 and "every group" in scoped.json()["error"]["message"]
    every = client.get("/metrics", headers={"authorization": f"Bearer {ADMIN_ALL}"})
    assert every.status_code == 200 and "epimem" in every.text


def test_the_documented_keys_file(tmp_path: Path) -> None:
    block = blocks(__file__, "json", DOCS / "trust.md")[0]
    path = tmp_path / "documented.json"
    path.write_text(block)
    ring = KeyRing.from_file(path)
    ops, team = ring.find("a-long-random-secret-for-ops"), ring.find("a-long-random-secret-team-a")
    assert ops is not None and ops.every_group and ops.role is Role.ADMIN and ops.expires is None
    assert team is not None and team.covers("proj-x") and not team.covers("team-b")
    assert team.expires == datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("expired", [False, True])
def test_a_keys_file_with_no_usable_key_stops_the_start(service: Epimem, tmp_path: Path, expired: bool) -> None:
    """An empty list (or only expired keys) never means local mode: the operator asked for keys."""
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    keys = [{"key": ADMIN_ALL, "groups": ["*"], "role": "admin", "expires": past}] if expired else []
    settings = Settings(**{**service.settings.model_dump(), "api_keys_file": _keys_file(tmp_path, keys)})
    with pytest.raises(InvalidInputError) as refused:
        create_app(service, settings)
    assert "no usable key" in refused.value.message and ADMIN_ALL not in refused.value.message
    env = {**os.environ, "EPIMEM_API_KEYS_FILE": str(tmp_path / "keys.json"), "EPIMEM_DATA_DIR": str(tmp_path / "d")}
    command = [sys.executable, "-m", "api.cli", "serve", "--host", "0.0.0.0", "--port", "0"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = run.stderr.strip().splitlines()
    assert run.returncode != 0 and len(lines) == 1, run.stderr
    assert "no usable key" in lines[0] and "no API keys are configured" not in lines[0]
