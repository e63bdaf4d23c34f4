"""The read-only /v1 routes the browser explorer uses (whoami, groups with counts, group overview,
timeline histogram) and the static files at /ui: real service, real Chroma, through the ASGI app."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers.builders import T0, messages
from helpers.docs_blocks import blocks
from helpers.embedders import ProjectedEmbedder
from helpers.paths import DOCS

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import GroupConfiguration, SessionInfo

ADMIN_KEY = "admin-key-0123456789"
READ_KEY = "read-key-0123456789ab"


def seed(service: Epimem) -> None:
    service.add_messages("team-a", "s1", messages(4, prefix="a", start=T0))
    service.add_messages("team-a", "s2", messages(3, prefix="b", start=T0 + timedelta(days=10)))
    service.put_session(SessionInfo(group_id="team-a", session_id="s1", title="Hiking chat", metadata={"k": 1}))
    service.flush("team-a", "s1")
    service.flush("team-a", "s2")
    service.add_messages("team-b", "s1", messages(2, prefix="c", start=T0))
    service.flush("team-b", "s1")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    folder = tmp_path_factory.mktemp("explorer-routes")
    keys_file = folder / "keys.json"
    keys = [
        {"key": ADMIN_KEY, "groups": ["*"], "role": "admin"},
        {"key": READ_KEY, "groups": ["team-a"], "role": "read"},
    ]
    keys_file.write_text(json.dumps({"keys": keys}))
    service = Epimem.from_settings(
        Settings(data_dir=folder / "data", api_keys_file=keys_file), background=False, embedder=embedder
    )
    seed(service)
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        yield client
    service.close()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.slow
def test_whoami_names_role_and_patterns_never_the_key(keyed: TestClient) -> None:
    assert keyed.get("/v1/auth/whoami").status_code == 401
    assert keyed.get("/v1/auth/whoami", headers=auth("wrong-key-0123456789")).status_code == 401
    response = keyed.get("/v1/auth/whoami", headers=auth(READ_KEY))
    assert response.json() == {"mode": "key", "role": "read", "groups": ["team-a"]}
    assert READ_KEY not in response.text
    assert keyed.get("/v1/auth/whoami", headers=auth(ADMIN_KEY)).json()["role"] == "admin"


def test_groups_lists_only_the_keys_groups_with_counts(keyed: TestClient) -> None:
    admin = keyed.get("/v1/groups", headers=auth(ADMIN_KEY)).json()
    assert [g["group_id"] for g in admin["groups"]] == ["team-a", "team-b"]
    team_a = admin["groups"][0]
    assert (team_a["sessions"], team_a["messages"]) == (2, 7)
    assert team_a["episodes"] >= 2
    assert team_a["first"].startswith("2023-05-08T13:00") and team_a["last"].startswith("2023-05-18")
    reader = keyed.get("/v1/groups", headers=auth(READ_KEY)).json()
    assert [g["group_id"] for g in reader["groups"]] == ["team-a"]  # team-b is not even named
    paged = keyed.get("/v1/groups", params={"limit": 1}, headers=auth(ADMIN_KEY)).json()
    assert [g["group_id"] for g in paged["groups"]] == ["team-a"] and paged["next_cursor"]
    params = {"limit": 1, "cursor": paged["next_cursor"]}
    second = keyed.get("/v1/groups", params=params, headers=auth(ADMIN_KEY)).json()
    assert [g["group_id"] for g in second["groups"]] == ["team-b"] and second["next_cursor"] is None
    assert keyed.get("/v1/groups", params={"limit": 0}, headers=auth(ADMIN_KEY)).status_code == 422


def test_overview_counts_per_session_and_keeps_groups_apart(keyed: TestClient) -> None:
    body = keyed.get("/v1/groups/team-a/overview", headers=auth(READ_KEY)).json()
    sessions = {s["session"]["session_id"]: s for s in body["sessions"]}
    assert set(sessions) == {"s1", "s2"}
    assert sessions["s1"]["messages"] == 4 and sessions["s2"]["messages"] == 3
    assert sessions["s1"]["session"]["title"] == "Hiking chat" and sessions["s1"]["session"]["metadata"] == {"k": 1}
    assert sessions["s1"]["episodes"] >= 1 and sessions["s2"]["episodes"] >= 1
    assert sessions["s2"]["first"].startswith("2023-05-18T13:00")
    assert body["group"]["episodes"] == sum(s["episodes"] for s in body["sessions"])
    assert keyed.get("/v1/groups/team-b/overview", headers=auth(READ_KEY)).status_code == 403
    assert keyed.get("/v1/groups/nope/overview", headers=auth(ADMIN_KEY)).status_code == 404


def test_histogram_buckets_and_natural_language_window(keyed: TestClient) -> None:
    url = "/v1/groups/team-a/timeline/histogram"
    whole = keyed.get(url, params={"buckets": 10}, headers=auth(READ_KEY)).json()
    assert whole["total"] >= 2 and whole["sessions"] == ["s1", "s2"]
    assert all(len(row) == 10 for row in whole["counts"])
    assert sum(map(sum, whole["counts"])) == whole["total"]
    assert whole["counts"][0][0] >= 1 and whole["counts"][1][-1] >= 1  # s1 at the start, s2 at the end
    reference = (T0 + timedelta(days=10)).isoformat()
    yesterday = keyed.get(
        url, params={"time": "10 days ago", "reference_time": reference}, headers=auth(READ_KEY)
    ).json()
    assert yesterday["sessions"] == ["s1"] and yesterday["start"].startswith("2023-05-08T00:00")
    one = keyed.get(url, params={"session_id": "s2"}, headers=auth(READ_KEY)).json()
    assert one["sessions"] == ["s2"]
    empty = keyed.get(url, params={"time": "2020"}, headers=auth(READ_KEY)).json()
    assert empty["total"] == 0 and empty["counts"] == []
    bad = keyed.get(url, params={"time": "when pigs fly"}, headers=auth(READ_KEY))
    assert bad.status_code == 422 and "cannot read the time window" in bad.json()["error"]["message"]
    backwards = keyed.get(url, params={"start": "2023-06-01", "end": "2023-05-01"}, headers=auth(READ_KEY))
    assert backwards.status_code == 422
    assert keyed.get("/v1/groups/team-b/timeline/histogram", headers=auth(READ_KEY)).status_code == 403


def test_ui_is_served_from_the_package_without_a_key(keyed: TestClient) -> None:
    page = keyed.get("/ui/")
    assert page.status_code == 200 and "epimem explorer" in page.text
    for asset in ("app.js", "core.js", "views.js", "timeline.js", "style.css"):
        assert asset in page.text
        assert keyed.get(f"/ui/{asset}").status_code == 200
    assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
    assert keyed.get("/ui", follow_redirects=False).status_code in (307, 308)


def test_the_key_file_example_in_the_docs_works(tmp_path, service: Epimem) -> None:
    """docs/explorer.md's key file, loaded by the app: the read key sees its role, patterns and groups."""
    found = blocks(__file__, "json", DOCS / "explorer.md")
    assert found
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(found[0])
    keys = json.loads(found[0])["keys"]
    reader = next(k["key"] for k in keys if k["role"] == "read")
    service.put_group(GroupConfiguration(group_id="proj-x"))
    service.put_group(GroupConfiguration(group_id="other"))
    settings = service.settings.model_copy(update={"api_keys_file": keys_file})
    with TestClient(create_app(service, settings), base_url="http://127.0.0.1") as client:
        who = client.get("/v1/auth/whoami", headers=auth(reader)).json()
        assert who == {"mode": "key", "role": "read", "groups": ["team-a", "proj-*"]}
        groups = client.get("/v1/groups", headers=auth(reader)).json()["groups"]
        assert [g["group_id"] for g in groups] == ["proj-x"]


def test_a_group_built_with_another_model_is_listed_as_unreadable_not_a_failed_list(
    service: Epimem, settings_for: Callable[..., Settings], embedder: SentenceTransformerEmbedder, group_id: str
) -> None:
    service.add_messages(group_id + "-old", "s1", messages(3, prefix="o", start=T0))
    service.flush(group_id + "-old", "s1")
    changed = Epimem.from_settings(settings_for(), background=False, embedder=ProjectedEmbedder(embedder))
    try:
        changed.add_messages(group_id + "-new", "s1", messages(2, prefix="n", start=T0))
        listed: dict[str, dict[str, Any]] = {}
        with TestClient(create_app(changed)) as client:
            cursor: str | None = None
            while True:
                response = client.get("/v1/groups", params={"limit": 100, **({"cursor": cursor} if cursor else {})})
                assert response.status_code == 200, response.text
                listed.update({g["group_id"]: g for g in response.json()["groups"]})
                cursor = response.json()["next_cursor"]
                if cursor is None:
                    break
        old, new = listed[group_id + "-old"], listed[group_id + "-new"]
        assert "reembed" in old["unreadable"] and old["messages"] == 0
        assert new["unreadable"] is None and new["messages"] == 2
    finally:
        changed.close()
