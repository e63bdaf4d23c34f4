"""Retention, webhooks and backups over HTTP and the command line: who may do what (retention: read to look,
admin of the group to change or sweep; webhooks, backups and restores: an admin key for every group), bad
input answered 4xx, a backup fetched by ``epimem backup --url`` restored by ``epimem restore --data-dir``
into an empty folder that then reads like the source, and the same over ``GET /v1/backup`` and
``POST /v1/restore``."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, chat, two_episode_session
from helpers.http_client import HTTP
from helpers.servers import AppServer
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.timeutil import utc_now

# Each test over about a second on a quiet core: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

KEYS = {
    "admin-a": {"key": "admin-a-0123456789abcdef", "groups": ["team-a"], "role": "admin", "name": "ops-a"},
    "read-a": {"key": "read-a-0123456789abcdef0", "groups": ["team-a"], "role": "read"},
    "admin-all": {"key": "admin-all-0123456789abcd", "groups": ["*"], "role": "admin", "name": "root"},
}
runner = CliRunner()


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[name]['key']}"}


@pytest.fixture
def served(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[tuple[AppServer, Epimem, Settings]]:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": list(KEYS.values())}))
    settings = Settings(data_dir=tmp_path / "source", api_keys_file=keys, webhook_allow_hosts="127.0.0.1")
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    two_episode_session(service, "team-a", "s1", day=0)
    service.add_messages("team-a", "s2", chat("s2", 2, start=T0))
    with AppServer(service, settings=settings) as server:
        yield server, service, settings
    service.close()


def view(service: Epimem, group_id: str) -> Any:
    hits = service.search(group_id, "hiking with the dog", k=5)
    return (
        [(h.episode.uuid, h.score) for h in hits],
        service.context(group_id, "pottery", token_budget=300).text,
        [e.uuid for e in service.timeline(group_id, limit=100).episodes],
        [m.id for m in service.history(group_id, "s2")],
    )


def test_retention_over_http(served: tuple[AppServer, Epimem, Settings]) -> None:
    server, service, _ = served
    with httpx.Client(base_url=server.url) as http:
        path = "/v1/groups/team-a/retention"
        assert http.put(path, json={"max_age_days": 30}, headers=auth("read-a")).status_code == 403
        for bad in ({"max_age_days": 0}, {"max_age_days": "soon"}, {"max_age_days": 1, "by": "later"}, {"days": 3}):
            answer = http.put(path, json=bad, headers=auth("admin-a"))
            assert answer.status_code == 422 and answer.json()["error"]["code"] in ("invalid_input", "validation_error")
        put = http.put(path, json={"max_age_days": 30}, headers=auth("admin-a"))
        assert put.status_code == 200 and put.json()["by"] == "timestamp"
        session = http.put(
            path.replace("/retention", "/sessions/s2/retention"),
            json={"max_age_days": 1, "by": "arrival"},
            headers=auth("admin-a"),
        )
        assert session.status_code == 200
        policies = http.get(path, headers=auth("read-a")).json()
        assert policies["group"]["max_age_days"] == 30 and [p["session_id"] for p in policies["sessions"]] == ["s2"]
        assert http.get("/v1/groups/nobody/retention", headers=auth("admin-all")).status_code == 404
        assert http.post(path + "/sweep", headers=auth("read-a")).status_code == 403

        preview = http.post(path + "/sweep", params={"dry_run": "true"}, headers=auth("admin-a")).json()
        assert preview["dry_run"] is True and sorted(preview["messages"]) == ["s1-a-0", "s1-a-1", "s1-b-0", "s1-b-1"]
        assert len(service.history("team-a", "s1")) == 4  # nothing changed
        swept = http.post(path + "/sweep", headers=auth("admin-a")).json()
        assert swept["counts"] == preview["counts"] and service.history("team-a", "s1") == []
        assert service.audit("team-a").entries[0].actor == "ops-a"
        cleared = http.delete(path.replace("/retention", "/sessions/s2/retention"), headers=auth("admin-a"))
        assert cleared.json() == {"cleared": True}


def test_webhooks_over_http(served: tuple[AppServer, Epimem, Settings]) -> None:
    server, _, _ = served
    body = {"url": "http://127.0.0.1:9/hook", "secret": "whsec-0123456789abcdef", "groups": ["team-a"]}
    with httpx.Client(base_url=server.url) as http:
        assert http.post("/v1/webhooks", json=body, headers=auth("admin-a")).status_code == 403  # not every group
        refused = http.post("/v1/webhooks", json={**body, "url": "http://10.1.2.3/hook"}, headers=auth("admin-all"))
        assert refused.status_code == 422 and "EPIMEM_WEBHOOK_ALLOW_HOSTS" in refused.json()["error"]["message"]
        assert http.post("/v1/webhooks", json={**body, "secret": "short"}, headers=auth("admin-all")).status_code == 422
        created = http.post("/v1/webhooks", json=body, headers=auth("admin-all"))
        assert created.status_code == 201 and "secret" not in created.json()
        subscription = created.json()["id"]
        assert created.json()["created_by"] == "root"
        listed = http.get("/v1/webhooks", headers=auth("admin-all"))
        assert [w["id"] for w in listed.json()["webhooks"]] == [subscription] and body["secret"] not in listed.text
        log = http.get(f"/v1/webhooks/{subscription}/deliveries", headers=auth("admin-all")).json()
        assert log["pending"] == 0 and log["attempts"] == []
        assert http.get("/v1/webhooks", headers=auth("admin-a")).status_code == 403
        assert http.delete(f"/v1/webhooks/{subscription}", headers=auth("admin-all")).status_code == 204
        assert http.get(f"/v1/webhooks/{subscription}/deliveries", headers=auth("admin-all")).status_code == 404
        assert http.delete("/v1/webhooks/not-hex!", headers=auth("admin-all")).status_code == 422


def test_backup_and_restore_over_http_and_the_command_line(
    served: tuple[AppServer, Epimem, Settings], tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    server, service, settings = served
    source = view(service, "team-a")
    assert HTTP.get(f"{server.url}/v1/backup", headers=auth("admin-a")).status_code == 403
    file = tmp_path / "server.backup.gz"
    env = {"EPIMEM_API_KEY": KEYS["admin-all"]["key"]}
    fetched = runner.invoke(app, ["backup", "--url", server.url, str(file), "--json"], env=env)
    assert fetched.exit_code == 0, fetched.output
    assert json.loads(fetched.stdout)["bytes"] == file.stat().st_size > 0
    with gzip.open(file) as stream:
        assert json.loads(stream.readline())["format"] == "epimem-backup"
    refused = runner.invoke(
        app, ["backup", "--url", server.url, str(tmp_path / "x.gz"), "--key", KEYS["read-a"]["key"]]
    )
    assert refused.exit_code == 1 and "forbidden" in refused.output and not (tmp_path / "x.gz").exists()

    folder = tmp_path / "restored"
    restored = runner.invoke(app, ["restore", str(file), "--data-dir", str(folder)], obj={"embedder": embedder})
    assert restored.exit_code == 0, restored.output
    again = runner.invoke(app, ["restore", str(file), "--data-dir", str(folder)], obj={"embedder": embedder})
    assert again.exit_code == 1 and "(conflict)" in again.output  # only into an empty folder
    copy = Epimem.from_settings(data_dir=folder, background=False, embedder=embedder)
    try:
        assert view(copy, "team-a") == source
    finally:
        copy.close()

    # Over HTTP: GET /v1/backup, POST /v1/restore into another (empty) server.
    other_settings = Settings(data_dir=tmp_path / "other", api_keys_file=settings.api_keys_file)
    other = Epimem.from_settings(other_settings, background=False, embedder=embedder)
    try:
        with AppServer(other, settings=other_settings) as target:
            downloaded = HTTP.get(f"{server.url}/v1/backup", params={"group": "team-a"}, headers=auth("admin-all"))
            assert downloaded.status_code == 200 and downloaded.headers["content-type"] == "application/gzip"
            as_text = HTTP.post(
                f"{target.url}/v1/restore",
                content=downloaded.content,
                headers={**auth("admin-all"), "content-type": "text/plain"},
            )
            assert as_text.status_code == 415
            assert (
                HTTP.post(f"{target.url}/v1/restore", content=b"not a backup", headers=auth("admin-all")).status_code
                == 422
            )
            headers = {**auth("admin-all"), "content-type": "application/gzip"}
            answer = HTTP.post(f"{target.url}/v1/restore", content=downloaded.content, headers=headers)
            assert answer.status_code == 200 and answer.json()["groups"] == ["team-a"], answer.text
            assert answer.json()["inexact_vectors"] == 0
            assert view(other, "team-a") == source
            assert HTTP.post(f"{target.url}/v1/restore", content=downloaded.content, headers=headers).status_code == 409
            missing = HTTP.get(f"{server.url}/v1/backup", params={"group": "nobody"}, headers=auth("admin-all"))
            assert missing.status_code == 404
    finally:
        other.close()


def test_a_sweeps_receipt_in_the_audit_trail_names_what_it_erased(
    settings_for: Callable[..., Settings],
    embedder: SentenceTransformerEmbedder,
    serve: Callable[..., AppServer],
    group_id: str,
    tmp_path: Path,
) -> None:
    """On either backend: ``GET /v1/groups/{g}/audit`` shows the sweep's counts and ids per kind (the
    proof of retention), and no entry holds a word of what was erased."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": list(KEYS.values())}))
    settings = settings_for(api_keys_file=keys)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    try:
        marker = f"zq{uuid.uuid4().hex[:10]}"
        two_episode_session(service, group_id, "s1", day=0, marker=marker)
        old = sorted(e.uuid for e in service.timeline(group_id, limit=100).episodes)
        service.add_messages(group_id, "s2", chat("s2", 2, start=utc_now() - timedelta(days=1)))
        server = serve(service, settings=settings)
        with httpx.Client(base_url=server.url, headers=auth("admin-all")) as http:
            path = f"/v1/groups/{group_id}/retention"
            assert http.put(path, json={"max_age_days": 365}).status_code == 200
            swept = http.post(path + "/sweep").json()
            assert swept["counts"]["messages"] == 4 and swept["counts"]["episodes"] == 2
            answer = http.get(f"/v1/groups/{group_id}/audit", params={"limit": 500})
            assert answer.status_code == 200
            (entry,) = [e for e in answer.json()["entries"] if e["action"] == "retention_sweep"]
    finally:
        service.close()
    assert entry["actor"] == "root" and entry["counts"] == swept["counts"] and entry["ids_left_out"] == 0
    assert sorted(entry["ids"]["messages"]) == ["s1-a-0", "s1-a-1", "s1-b-0", "s1-b-1"]
    assert sorted(entry["ids"]["episodes"]) == old and len(old) == 2
    assert entry["ids"]["sessions"] == ["s1"] and entry["target_ids"] == ["s1"]
    assert marker not in answer.text
