"""`epimem keys` against a running epimem (uvicorn, real HTTP): make, list, rotate and revoke keys, set limits
and read use; the key from EPIMEM_API_KEY or --key; refusals as one line with the API's code."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.http_client import HTTP
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem

ROOT = "root-cli-0123456789abcdef"
runner = CliRunner()


@pytest.fixture
def url(make_service: Callable[..., Epimem], serve: Callable[..., Any], tmp_path: Path) -> str:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": ROOT, "groups": ["*"], "role": "admin", "name": "root-cli"}]}))
    return str(serve(make_service(api_keys_file=keys)).url)


def keys(url: str, *args: str, key: str | None = ROOT, code: int = 0) -> str:
    env = {"EPIMEM_URL": url, **({"EPIMEM_API_KEY": key} if key else {})}
    result = runner.invoke(app, ["keys", *args], env=env)
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


@pytest.mark.slow
def test_keys_from_the_command_line(url: str, group_id: str) -> None:
    made = json.loads(keys(url, "create", f"bot-{group_id}", "-g", group_id, "--role", "write", "--json"))
    secret = made["key"]
    headers = {"authorization": f"Bearer {secret}"}
    assert HTTP.get(f"{url}/v1/groups/{group_id}/sessions", headers=headers).status_code == 200
    added = {"messages": [{"id": "m1", "content": "Ana adopted a dog."}]}
    assert HTTP.post(f"{url}/v1/groups/{group_id}/sessions/s1/messages", json=added, headers=headers).is_success

    listed = keys(url, "list", "--json")
    assert secret not in listed and made["id"] in listed
    assert secret not in keys(url, "list")  # the table too
    plain = keys(url, "create", f"plain-{group_id}", "-g", "a*", "-g", "b", "--messages-per-day", "9")
    assert "shown this once" in plain and "epm_" in plain

    rotated = json.loads(keys(url, "rotate", made["id"], "--json"))["key"]
    assert HTTP.get(f"{url}/v1/groups/{group_id}/sessions", headers=headers).status_code == 401
    limited = json.loads(keys(url, "limits", made["id"], "--messages-per-day", "1", "--json"))
    assert limited["limits"] == {"messages_per_day": 1}
    group = json.loads(keys(url, "group-limits", group_id, "--stored-chars", "1000", "--json"))
    assert group["limits"] == {"stored_chars": 1000} and group["usage"]["stored_chars"] == len("Ana adopted a dog.")
    assert "stored_chars" in keys(url, "usage", group_id)
    rows = json.loads(keys(url, "usage", "--json"))["rows"]
    assert {"kind": "key", "id": made["id"], "messages_today": 1} in rows
    assert {"kind": "group", "id": group_id, "messages_today": 1} in rows

    assert "revoked" in keys(url, "revoke", made["id"])
    rotated_headers = {"authorization": f"Bearer {rotated}"}
    assert HTTP.get(f"{url}/v1/groups/{group_id}/sessions", headers=rotated_headers).status_code == 401


def test_refusals_are_one_line_with_the_code(url: str, group_id: str) -> None:
    writer = json.loads(keys(url, "create", f"w-{group_id}", "-g", "*", "--role", "write", "--json"))["key"]
    assert "error (forbidden)" in keys(url, "list", key=writer, code=1)
    assert "error (unauthorized)" in keys(url, "list", key=None, code=1)
    assert "error (not_found)" in keys(url, "revoke", "key-0123456789ab", code=1)
    assert "error (invalid_input)" in keys(url, "create", "x", "-g", "a*b", code=1)
    unreachable = runner.invoke(app, ["keys", "list", "--url", "http://127.0.0.1:9", "--key", ROOT])
    assert unreachable.exit_code == 1 and "error (server_unreachable)" in unreachable.output
