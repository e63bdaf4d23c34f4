"""The README's quickstart and API examples work as written: the Python blocks are executed, the curl
blocks run against a real uvicorn server (only the address is changed), the key file is loaded."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from test_client import Server

from api.auth import KeyRing
from api.facade import Epimem
from memory.embedding import SentenceTransformerEmbedder
from memory.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"


def section(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"<!-- section:{name} -->")
    end = text.find("<!-- section:", start + 1)
    return text[start : end if end != -1 else None]


def blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(name), flags=re.S)


def run_bash(script: str, url: str, cwd: Path) -> str:
    script = script.replace("localhost:8000", url).replace("curl -s ", "curl -sS --fail-with-body ")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def test_quickstart_python_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (code,) = blocks("quickstart", "python")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README quickstart", "exec"), {})
    printed = capsys.readouterr().out
    assert "Rex" in printed and "Relevant memory" in printed
    assert (tmp_path / "data" / "chroma").is_dir()


def test_curl_and_client_examples_run_as_written(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    service = Epimem.from_settings(Settings(data_dir=tmp_path / "data"), background=False, embedder=embedder)
    try:
        with Server(service) as server:
            address = server.url.removeprefix("http://")
            (quickstart,) = blocks("quickstart", "bash")
            answers = [
                json.loads(line)
                for line in run_bash(quickstart, address, tmp_path).replace("}{", "}\n{").split("\n")
                if line
            ]
            assert answers[0]["accepted"] == ["1", "2"]
            assert answers[-1]["hits"] and "Rex" in answers[-1]["hits"][0]["episode"]["content"]

            api_bash = blocks("api", "bash")
            curl_examples = [block for block in api_bash if "curl" in block]
            assert curl_examples
            for block in curl_examples:
                run_bash(block, address, tmp_path)
            assert (tmp_path / "team-a.jsonl").read_text().startswith('{"type":"header"')
            assert service.list_sessions("team-b") == []  # imported, then deleted by the example

            (client_example,) = blocks("api", "python")
            exec(compile(client_example.replace("http://127.0.0.1:8000", server.url), "README client", "exec"), {})
            assert [s.session_id for s in service.list_sessions("team-a")] == ["chat-1", "chat-2"]
    finally:
        service.close()


def test_key_file_example_is_valid(tmp_path: Path) -> None:
    (example,) = [block for block in blocks("api", "json") if '"keys"' in block]
    path = tmp_path / "keys.json"
    path.write_text(example)
    ring = KeyRing.from_file(path)
    assert ring.enabled
    key = ring.find("a-long-random-secret-reader")
    assert key is not None and key.covers("proj-x") and not key.covers("team-b")
