"""The walk-through of docs/operating.md, run as a reader runs it: the seed keys file, `epimem serve` as a real
process with it, then `epimem keys` and curl against that server; then what it says is checked over HTTP."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers.docs_blocks import blocks
from helpers.http_client import HTTP
from helpers.paths import BIN, DOCS
from helpers.processes import clean_env
from helpers.servers import ServerProcess, free_port

# A real server process: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow
PAGE = DOCS / "operating.md"


def test_the_operators_walk_through(tmp_path: Path) -> None:
    (keys_json,) = blocks(__file__, "json", PAGE)
    serve, manage = blocks(__file__, "bash", PAGE)
    (tmp_path / "keys.json").write_text(keys_json)
    admin = json.loads(keys_json)["keys"][0]["key"]

    *assignments, command, verb = serve.split()
    assert (command, verb) == ("epimem", "serve")
    port = free_port()
    env = clean_env(**dict(a.split("=", 1) for a in assignments), PATH=f"{BIN}:{clean_env()['PATH']}")
    server = ServerProcess([str(BIN / "epimem"), "serve", "--port", str(port)], port=port, env=env, cwd=tmp_path)
    with server:
        script = manage.replace("localhost:8000", f"127.0.0.1:{port}").replace("curl -s ", "curl -sS --fail-with-body ")
        run = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        made = json.loads((tmp_path / "made.json").read_text())
        rotated = json.loads((tmp_path / "rotated.json").read_text())
        assert made["id"] == rotated["id"] and made["key"] != rotated["key"]
        assert "support-bot" in run.stdout and made["key"] not in run.stdout  # `keys list` shows no secret
        for secret in (made["key"], rotated["key"]):  # rotated, then revoked: both refused
            refused = HTTP.get(f"{server.url}/v1/groups/team-a/sessions", headers={"authorization": f"Bearer {secret}"})
            assert refused.status_code == 401
        listed = HTTP.get(f"{server.url}/v1/keys", headers={"authorization": f"Bearer {admin}"}).json()["keys"]
        by_name = {key["name"]: key for key in listed}
        assert by_name["support-bot"]["status"] == "revoked" and by_name["ops"]["source"] == "file"
        assert by_name["support-bot"]["limits"] == {"messages_per_day": 10000}
        assert by_name["reporting"]["groups"] == ["team-*"] and by_name["reporting"]["expires_at"].startswith("2030")
        assert by_name["support-bot"]["usage"] == {"messages_today": 1}
    for path in (tmp_path / "data").rglob("*"):  # the data folder holds no secret
        if path.is_file():
            data = path.read_bytes()
            assert made["key"].encode() not in data and rotated["key"].encode() not in data
            assert re.search(rb"epm_[0-9a-f]{12}_[A-Za-z0-9_-]{40}", data) is None, path
    assert shlex.split(serve)[0].startswith("EPIMEM_API_KEYS_FILE=")
