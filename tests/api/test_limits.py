"""Limits per key and per group over real HTTP (uvicorn), on both Chroma backends: requests per second (a clock
the test moves), messages per day, stored characters (recounted after a deletion); over a limit 429 with
Retry-After and the error body naming the limit, other keys and groups unaffected; limits and use shown to the
admin and in /metrics; the same limits on MCP."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, turns
from helpers.checks import every_client, scan_client
from helpers.http_client import HTTP

from api.facade import Epimem
from memory.timeutil import utc_now

ROOT = "root-limits-0123456789abcdef"


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, method: str, path: str, key: str | None = ROOT, **options: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        headers.update(options.pop("headers", {}))
        return HTTP.request(method, f"{self.url}{path}", headers=headers, timeout=120, **options)


@pytest.fixture
def server(make_service: Callable[..., Epimem], serve: Callable[..., Any], tmp_path: Path) -> Any:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": ROOT, "groups": ["*"], "role": "admin", "name": "root"}]}))
    return serve(make_service(api_keys_file=keys, usage_refresh_s=0))


@pytest.fixture
def api(server: Any) -> Api:
    return Api(server.url)


def _key(api: Api, name: str, groups: list[str], **limits: float) -> tuple[str, str]:
    made = api("POST", "/v1/keys", json={"name": name, "groups": groups, "role": "admin", "limits": limits})
    assert made.status_code == 201, made.text
    return made.json()["id"], made.json()["key"]


def _add(
    api: Api, key: str | None, group: str, ids: list[str], *, size: int = 10, session: str = "s1"
) -> httpx.Response:
    messages = turns([("ana", "x" * size) for _ in ids], start=T0)
    for message, message_id in zip(messages, ids, strict=True):
        message["id"] = message_id
    return api("POST", f"/v1/groups/{group}/sessions/{session}/messages", key, json={"messages": messages})


def _refused(answer: httpx.Response, limit: str, scope: str) -> dict[str, Any]:
    assert answer.status_code == 429, answer.text
    assert int(answer.headers["retry-after"]) >= 1
    error = answer.json()["error"]
    assert error["code"] == "too_many_requests" and error["details"]["limit"] == limit, error
    assert error["details"]["scope"] == scope and limit in error["message"]
    return dict(error)


def test_requests_per_second_per_key_and_group(server: Any, api: Api, group_id: str) -> None:
    now = [1000.0]
    server.app.state.quotas.rates.clock = lambda: now[0]  # time stands still unless the test moves it
    _, fast = _key(api, f"fast-{group_id}", ["*"], requests_per_second=2)
    _, other = _key(api, f"other-{group_id}", ["*"])
    path = f"/v1/groups/{group_id}/sessions"
    assert [api("GET", path, fast).status_code for _ in range(2)] == [200, 200]
    refused = _refused(api("GET", path, fast), "requests_per_second", "key")
    assert refused["details"]["value"] == 2
    assert api("GET", path, other).status_code == 200  # another key is unaffected
    now[0] += 0.5  # half a second: one more request's worth
    assert api("GET", path, fast).status_code == 200
    assert api("GET", path, fast).status_code == 429

    assert api("PUT", f"/v1/groups/{group_id}/limits", json={"requests_per_second": 1}).status_code == 200
    now[0] += 10
    assert api("GET", path, other).status_code == 200
    _refused(api("GET", path, other), "requests_per_second", "group")
    assert api("GET", f"/v1/groups/{group_id}-b/sessions", other).status_code == 200  # another group is unaffected


@pytest.mark.slow
def test_messages_per_day_per_key_and_group(api: Api, group_id: str) -> None:
    key_id, limited = _key(api, f"daily-{group_id}", ["*"], messages_per_day=5)
    _, other = _key(api, f"free-{group_id}", ["*"])
    assert _add(api, limited, group_id, ["a1", "a2", "a3"]).status_code == 200
    refused = _refused(_add(api, limited, group_id, ["a4", "a5", "a6"]), "messages_per_day", "key")
    assert refused["details"]["used"] == 3 and refused["details"]["asked"] == 3
    assert api("GET", f"/v1/groups/{group_id}/sessions/s1/messages").json()["messages"][-1]["id"] == "a3"  # nothing
    assert _add(api, limited, group_id, ["a1", "a2"]).status_code == 200  # duplicates are given back, not counted
    assert _add(api, limited, group_id, ["a4", "a5"]).status_code == 200
    _refused(_add(api, limited, group_id, ["a6"]), "messages_per_day", "key")
    assert _add(api, limited, group_id, ["a4", "a5"]).status_code == 200  # at the limit, a retry of what was stored
    assert _add(api, other, group_id, ["b1", "b2", "b3"]).status_code == 200  # another key is unaffected
    usage = {k["id"]: k for k in api("GET", "/v1/keys").json()["keys"]}[key_id]
    assert usage["usage"] == {"messages_today": 5} and usage["effective_limits"] == {"messages_per_day": 5}

    limited_group = f"{group_id}-small"
    set_limits = api("PUT", f"/v1/groups/{limited_group}/limits", json={"messages_per_day": 2})
    assert set_limits.status_code == 200 and set_limits.json()["limits"] == {"messages_per_day": 2}
    assert _add(api, other, limited_group, ["c1", "c2"]).status_code == 200
    _refused(_add(api, other, limited_group, ["c3"]), "messages_per_day", "group")
    assert _add(api, other, f"{group_id}-big", ["c3"]).status_code == 200  # another group is unaffected
    rows = {(r["kind"], r["id"]): r["messages_today"] for r in api("GET", "/v1/usage").json()["rows"]}
    assert rows[("key", key_id)] == 5 and rows[("group", limited_group)] == 2 and rows[("group", group_id)] == 8


@pytest.mark.slow
def test_stored_characters_are_recounted_after_a_deletion(api: Api, group_id: str) -> None:
    assert _add(api, ROOT, group_id, ["old"], size=30, session="before").status_code == 200  # before any limit
    assert api("PUT", f"/v1/groups/{group_id}/limits", json={"stored_chars": 100}).status_code == 200
    assert _add(api, ROOT, group_id, ["m1", "m2"], size=30).status_code == 200
    refused = _refused(_add(api, ROOT, group_id, ["m3"], size=30), "stored_chars", "group")
    assert refused["details"]["used"] == 90
    usage = api("GET", f"/v1/groups/{group_id}/usage").json()
    assert usage["usage"]["stored_chars"] == 90 and usage["effective_limits"] == {"stored_chars": 100}
    assert api("DELETE", f"/v1/groups/{group_id}/sessions/before").status_code == 200
    assert api("GET", f"/v1/groups/{group_id}/usage").json()["usage"]["stored_chars"] == 60
    assert _add(api, ROOT, group_id, ["m3"], size=30).status_code == 200
    assert _add(api, ROOT, f"{group_id}-other", ["m3"], size=300).status_code == 200  # another group is unaffected


def test_a_deleted_group_stays_in_no_counter_or_limit(server: Any, api: Api, group_id: str) -> None:
    tenant = f"{group_id}-tenant-name"
    assert api("PUT", f"/v1/groups/{tenant}/limits", json={"messages_per_day": 100}).status_code == 200
    assert _add(api, ROOT, tenant, ["a1", "a2"]).status_code == 200
    rows = {(r["kind"], r["id"]) for r in api("GET", "/v1/usage").json()["rows"]}
    assert ("group", tenant) in rows  # listed by its id while it exists
    assert api("DELETE", f"/v1/groups/{tenant}").status_code == 200
    rows = {(r["kind"], r["id"]) for r in api("GET", "/v1/usage").json()["rows"]}
    assert not [row for row in rows if tenant in row[1]]
    service = server.service
    assert scan_client(every_client(service), [tenant]) == []  # not in a record, a name or a metadata value
    if service.settings.chroma_host is None:  # and not a byte of the embedded folder
        for path in service.settings.data_dir.rglob("*"):
            assert not path.is_file() or tenant.encode() not in path.read_bytes(), path


def test_limits_and_use_are_in_metrics(api: Api, group_id: str) -> None:
    key_id, limited = _key(api, f"metered-{group_id}", ["*"], messages_per_day=2)
    assert _add(api, limited, group_id, ["a1", "a2"]).status_code == 200
    assert _add(api, limited, group_id, ["a3"]).status_code == 429
    text = api("GET", "/metrics").text
    assert f'epimem_key_messages_today{{key="{key_id}"}} 2.0' in text
    assert f'epimem_key_limit{{key="{key_id}",limit="messages_per_day"}} 2.0' in text
    assert 'epimem_limit_refusals_total{limit="messages_per_day",scope="key"}' in text
    assert group_id not in text  # group ids never become labels


@pytest.mark.slow
def test_bad_limits_are_refused(api: Api, group_id: str) -> None:
    key_id, _ = _key(api, f"tuned-{group_id}", ["*"])
    for body in (
        {"messages_per_day": "5"},
        {"messages_per_day": True},
        {"requests_per_second": 0},
        {"stored_chars": 10},
        {"unknown": 1},
        [],
    ):
        assert api("PUT", f"/v1/keys/{key_id}/limits", json=body).status_code == 422, body
    for body in ({"stored_chars": -1}, {"stored_chars": 1.5}, {"messages_per_day": None, "x": 1}):
        assert api("PUT", f"/v1/groups/{group_id}/limits", json=body).status_code == 422, body
    changed = api("PUT", f"/v1/keys/{key_id}/limits", json={"requests_per_second": 2.5})
    assert changed.status_code == 200 and changed.json()["limits"] == {"requests_per_second": 2.5}
    assert api("PUT", f"/v1/keys/{key_id}/limits", json={}).json()["limits"] == {}


def test_retry_after_of_a_daily_limit_is_the_next_utc_midnight(server: Any, api: Api, group_id: str) -> None:
    quotas = server.app.state.quotas
    quotas.clock = lambda: datetime(2030, 5, 1, 23, 59, 30, tzinfo=UTC)
    try:
        _, limited = _key(api, f"late-{group_id}", ["*"], messages_per_day=1)
        assert _add(api, limited, group_id, ["a1"]).status_code == 200
        refused = _add(api, limited, group_id, ["a2"])
        assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
        quotas.clock = lambda: datetime(2030, 5, 2, 0, 0, 1, tzinfo=UTC)  # a new day
        assert _add(api, limited, group_id, ["a2"]).status_code == 200
    finally:
        quotas.clock = utc_now


def _mcp_add(api: Api, key: str, group: str, ids: list[str]) -> str:
    """The MCP tool add_messages over /mcp (stateless JSON-RPC); its error text, or "" on success."""
    arguments = {"group": group, "session": "s1", "messages": [{"id": i, "content": "hello"} for i in ids]}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "add_messages", "arguments": arguments},
    }
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    answer = api("POST", "/mcp", key, json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    return str(result["content"][0]["text"]) if result.get("isError") else ""


def test_the_same_limits_on_mcp(server: Any, api: Api, group_id: str) -> None:
    pytest.importorskip("mcp")
    now = [50.0]
    server.app.state.quotas.rates.clock = lambda: now[0]  # time stands still unless the test moves it
    key_id, limited = _key(api, f"mcp-{group_id}", ["*"], messages_per_day=2, requests_per_second=3)
    assert _mcp_add(api, limited, group_id, ["a1", "a2"]) == ""
    refused = _mcp_add(api, limited, group_id, ["a3"])
    assert refused.startswith("too_many_requests:") and "messages_per_day" in refused
    assert _add(api, limited, group_id, ["a3"]).status_code == 429  # one count for both surfaces
    now[0] += 10  # a full bucket again: three requests
    assert [_mcp_add(api, limited, group_id, ["a1"]) for _ in range(3)] == ["", "", ""]  # retries: nothing counted
    refused = _mcp_add(api, limited, group_id, ["a1"])
    assert refused.startswith("too_many_requests:") and "requests_per_second" in refused


@pytest.mark.slow
def test_an_import_counts_as_an_add(api: Api, group_id: str) -> None:
    """Messages that a write key imports count against its messages_per_day: the limit reached by an import,
    an add is refused; a re-import adds (and counts) nothing; an import over the limit writes nothing."""
    made = api("POST", "/v1/keys", json={"name": f"w-{group_id}", "groups": ["*"], "role": "write"})
    limited, limited_id = made.json()["key"], made.json()["id"]
    assert api("PUT", f"/v1/keys/{limited_id}/limits", json={"messages_per_day": 4}).status_code == 200
    _, other = _key(api, f"other-{group_id}", ["*"])
    source, bigger = f"{group_id}-src", f"{group_id}-big"
    assert _add(api, other, source, ["m1", "m2", "m3"]).status_code == 200
    assert _add(api, other, source, ["m4"], session="s2").status_code == 200
    assert _add(api, other, bigger, ["n1", "n2"]).status_code == 200
    export = api("GET", f"/v1/groups/{source}/export").content
    ndjson = {"content-type": "application/x-ndjson"}

    imported = api("POST", f"/v1/groups/{group_id}/import", limited, content=export, headers=ndjson)
    assert imported.status_code == 200 and imported.json()["messages"] == 4, imported.text
    usage = {k["id"]: k for k in api("GET", "/v1/keys").json()["keys"]}[limited_id]["usage"]
    assert usage == {"messages_today": 4}
    _refused(_add(api, limited, group_id, ["a1"], session="s3"), "messages_per_day", "key")
    again = api("POST", f"/v1/groups/{group_id}/import", limited, content=export, headers=ndjson)
    assert again.status_code == 200  # what the group holds already is not added, nor counted
    over = api("POST", f"/v1/groups/{group_id}-b/import", limited, content=export, headers=ndjson)
    _refused(over, "messages_per_day", "key")
    assert api("GET", f"/v1/groups/{group_id}-b/sessions").json().get("sessions", []) == []
    assert _add(api, other, group_id, ["b1"], session="s3").status_code == 200  # another key is unaffected

    assert api("PUT", f"/v1/groups/{bigger}/limits", json={"messages_per_day": 3}).status_code == 200
    group_over = api("POST", f"/v1/groups/{bigger}/import", other, content=export, headers=ndjson)
    _refused(group_over, "messages_per_day", "group")  # 2 today + 4 imported > 3
