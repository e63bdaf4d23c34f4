"""The first hour of a new user, by running the real commands: ``epimem serve`` checks everything it
can before loading the model (one plain line, non-zero exit, no traceback) and announces itself only
once it listens; one process per embedded data folder; commands that need no model do not load it;
the CLI's messages name the file type, the line and the unknown group; ``GET /`` says where to go."""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers.http_client import HTTP
from helpers.processes import clean_env, epimem
from helpers.servers import ServerProcess, free_port
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.server import create_app
from epimem_client import EpimemClient
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.embedding.lazy import LazyEmbedder
from memory.engine.folder_lock import FolderLockedError

WEIGHTS = "Loading weights"  # what loading the model prints


def one_plain_line(result: subprocess.CompletedProcess[str], status: int, *words: str) -> str:
    lines = [line for line in result.stderr.splitlines() if re.match(r"error( \([a-z_]+\))?: ", line)]
    assert result.returncode == status, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and WEIGHTS not in result.stderr, result.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- serve: checks before loading anything ------------------------------------------------------------------------


@pytest.mark.slow
def test_serve_refuses_a_bad_data_folder_or_key_file_in_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    one_plain_line(epimem("serve", "--data-dir", str(a_file), "--port", str(free_port())), 2, "is a file")
    one_plain_line(epimem("stats", "--data-dir", str(a_file)), 1, "is a file")  # the other commands too
    missing_keys = tmp_path / "keys.json"
    result = epimem("serve", "--data-dir", str(tmp_path / "d"), EPIMEM_API_KEYS_FILE=str(missing_keys))
    one_plain_line(result, 2, "does not exist")
    missing_keys.write_text('{"keys": [{"key": "short", "groups": ["*"], "role": "admin"}]}')
    one_plain_line(epimem("serve", "--data-dir", str(tmp_path / "d"), EPIMEM_API_KEYS_FILE=str(missing_keys)), 2)
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "read-only"
        locked.mkdir(mode=0o500)
        one_plain_line(epimem("serve", "--data-dir", str(locked / "data")), 2, "cannot")


@pytest.mark.slow
def test_serve_reports_a_busy_port_before_opening_the_store(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = epimem("serve", "--data-dir", str(tmp_path / "data"), "--port", str(port))
    one_plain_line(result, 2, f"port {port}", "already in use")
    assert not (tmp_path / "data").exists()  # the store was never opened, the folder not even created


@pytest.fixture
def running_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """A real ``epimem serve`` on its own embedded folder, and the folder."""
    data = tmp_path / "served"
    with ServerProcess.serve("--data-dir", str(data), env=clean_env(), log=tmp_path / "serve.log") as server:
        yield server, data


@pytest.mark.slow
def test_one_process_per_embedded_folder(running_server: tuple[ServerProcess, Path]) -> None:
    server, data = running_server
    process, port, log = server.process, server.port, server.log
    text = log.read_text()
    banner = [line for line in text.splitlines() if line.startswith("epimem is listening")]
    assert len(banner) == 1 and f"http://127.0.0.1:{port}" in banner[0] and "another terminal" in banner[0]
    assert text.index("Application startup complete") < text.index(banner[0])  # only once it listens
    holder = f"pid {process.pid}"
    assert (data / "epimem.lock").read_text().startswith(holder)

    second = epimem("serve", "--data-dir", str(data), "--port", str(free_port()))
    line = one_plain_line(second, 2, holder, "stop that process", "Chroma server")
    assert str(data) in line
    one_plain_line(epimem("stats", "--data-dir", str(data)), 1, holder)
    with pytest.raises(FolderLockedError, match=holder):
        Epimem.from_settings(data_dir=data, background=False)
    # The server is unharmed, and once it stops the folder is free again.
    assert HTTP.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    process.terminate()
    process.wait(timeout=60)
    freed = epimem("stats", "--data-dir", str(data), "--json")
    assert freed.returncode == 0, freed.stderr[-2000:]
    assert json.loads(freed.stdout)["groups"] == []


@pytest.mark.slow
def test_the_lock_is_shared_inside_a_process_and_released_by_the_last_close(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    first = Epimem.from_settings(data_dir=tmp_path, background=False, embedder=embedder)
    second = Epimem.from_settings(data_dir=tmp_path, background=False, embedder=embedder)
    lock = tmp_path / "epimem.lock"
    assert lock.read_text().startswith(f"pid {os.getpid()}")
    first.close()
    first.close()  # closing twice releases once
    assert lock.read_text().startswith(f"pid {os.getpid()}")  # the second service still holds it
    second.close()
    assert lock.read_text() == ""  # released: another process may open the folder now
    result = epimem("stats", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]


# -- commands that need no model ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_commands_that_need_no_model_do_not_load_it(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    data = tmp_path / "data"
    service = Epimem.from_settings(data_dir=data, background=False, embedder=embedder)
    service.add_messages("team", "chat", [{"id": "1", "content": "Ana adopted a dog called Rex."}])
    service.flush("team", "chat")
    service.close()

    for command in (["stats"], ["export", "team"], ["timeline", "team"]):
        result = epimem(*command, "--data-dir", str(data))
        assert result.returncode == 0, result.stderr[-2000:]
        assert WEIGHTS not in result.stderr and "loading the embedding model" not in result.stderr, command
    searched = epimem("search", "team", "dog", "--data-dir", str(data), "--json")
    assert searched.returncode == 0 and "Rex" in searched.stdout  # the model loads when a query is embedded
    assert "loading the embedding model" in searched.stderr  # and says so


@pytest.mark.slow
def test_commands_that_need_no_model_import_neither_model_nor_web_server(tmp_path: Path) -> None:
    """What makes ``stats`` fast: torch, sentence-transformers and uvicorn are never imported."""
    probe = (
        "import sys\n"
        "from api.cli.entry import main\n"
        f"sys.argv = ['epimem', 'stats', '--data-dir', {str(tmp_path / 'data')!r}]\n"
        "try:\n    main()\nexcept SystemExit as done:\n    assert not done.code, done.code\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'uvicorn', 'arrow') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], env=clean_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_lazy_embedder_knows_the_model_id_without_loading(embedder: SentenceTransformerEmbedder) -> None:
    loads: list[int] = []

    def load() -> SentenceTransformerEmbedder:
        loads.append(1)
        return embedder

    lazy = LazyEmbedder(load=load)
    assert lazy.model_id == embedder.model_id and lazy.dimension == embedder.dimension
    assert not lazy.loaded and not loads
    assert lazy.embed_batch([]).shape == (0, embedder.dimension) and not loads
    assert (lazy.embed_batch(["a dog"]) == embedder.embed_batch(["a dog"])).all()
    assert lazy.loaded and loads == [1]
    lazy.count_tokens("again")
    assert loads == [1]


def test_a_service_and_its_clients_load_the_tls_certificates_once_at_most(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading the CA bundle costs ~17 ms of CPU: a service that delivers no webhook loads none, and the thin
    clients of one process share one TLS context."""
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        original(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    service = Epimem.from_settings(data_dir=tmp_path / "data", embedder=embedder)
    try:
        service.add_messages("g", "s", [{"id": "1", "content": "Ana adopted a dog.", "producer_id": "ana"}])
        assert service.search("g", "dog")
    finally:
        service.close()
    assert loads == []
    clients = [EpimemClient("http://127.0.0.1:9") for _ in range(3)]
    for client in clients:
        client.close()
    assert len(loads) <= 1


# -- messages ------------------------------------------------------------------------------------------------------

runner = CliRunner()


def said(result: object) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(str(getattr(result, "output", "")).split())


@pytest.fixture
def obj(embedder: SentenceTransformerEmbedder) -> dict[str, object]:
    return {"embedder": embedder}


def test_help_shows_flags_as_flags() -> None:
    for command in ("search", "timeline", "stats", "export", "import"):
        result = runner.invoke(app, [command, "--help"], terminal_width=140)
        assert result.exit_code == 0
        assert "<bool>" not in result.output, result.output
    assert "--json " in runner.invoke(app, ["stats", "--help"], terminal_width=140).output
    assert "Blocks until stopped" in runner.invoke(app, ["serve", "--help"], terminal_width=140).output


def test_import_messages_name_the_file_type_and_the_line(tmp_path: Path, obj: dict[str, object]) -> None:
    good = '{"group_id": "g", "session_id": "s", "id": "1", "content": "hi", "timestamp": "2024-01-01T10:00:00Z"}'
    broken = tmp_path / "broken.jsonl"
    broken.write_text(good + "\n{not json\n")
    result = runner.invoke(app, ["import", str(broken), "--data-dir", str(tmp_path / "d")], obj=obj)
    assert result.exit_code == 1
    assert "JSON Lines file" in said(result) and "line 2" in said(result) and "LoCoMo" not in said(result)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(good + "\n" + '{"session_id": "s", "id": "2", "content": "no group"}\n')
    result = runner.invoke(app, ["import", str(missing), "--data-dir", str(tmp_path / "d")], obj=obj)
    assert result.exit_code == 1
    assert "line 2" in said(result) and "missing field 'group_id'" in said(result)
    locomo = tmp_path / "pretty.json"
    locomo.write_text('{\n  "not": "a list"\n}\n')
    result = runner.invoke(app, ["import", str(locomo), "--data-dir", str(tmp_path / "d")], obj=obj)
    assert result.exit_code == 1 and "LoCoMo" in said(result)


def test_an_unknown_group_answers_empty_with_a_note(tmp_path: Path, obj: dict[str, object]) -> None:
    """As over HTTP (docs/http-api.md, "Unknown groups"): an empty answer, and a note that names the group."""
    for command in (["search", "nobody", "dog"], ["timeline", "nobody"], ["context", "nobody", "dog"]):
        result = runner.invoke(app, [*command, "--data-dir", str(tmp_path)], obj=obj)
        assert result.exit_code == 0, result.output
        assert "note: group 'nobody' holds nothing" in said(result)


def test_the_root_points_to_the_docs_and_the_explorer(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    service = Epimem.from_settings(data_dir=tmp_path, background=False, embedder=embedder)
    try:
        with TestClient(create_app(service=service)) as client:
            answer = client.get("/")
            assert answer.status_code == 200
            body = answer.json()
            assert body["docs"] == "/docs" and client.get(body["docs"]).status_code == 200
            assert body["openapi"] == "/openapi.json"
            if body["explorer"] is not None:
                assert client.get(body["explorer"]).status_code == 200
    finally:
        service.close()
