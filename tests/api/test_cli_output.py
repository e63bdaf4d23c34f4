"""What the command line prints, as a new user reads it: usage names in capitals, one error format for
every error (``error (code): message``), no "Loading weights" bar or debug lines on a plain command, a port
that is busy refused before anything is said or written, and a context whose citations are listed."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.builders import messages
from helpers.paths import BIN
from helpers.processes import clean_env
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

runner = CliRunner()
ERROR_LINE = re.compile(r"^error \([a-z_]+\): \S")


def epimem(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "epimem"), *args], capture_output=True, text=True, cwd=cwd, env=clean_env(), timeout=300
    )


def test_usage_names_arguments_in_capitals() -> None:
    for command, usage in (
        (["search"], "epimem search [OPTIONS] GROUP_ID QUERY"),
        (["import"], "epimem import [OPTIONS] PATH"),
        (["export"], "epimem export [OPTIONS] GROUP_ID"),
    ):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert f"Usage: {usage}" in result.output and "{" not in result.output


def test_every_error_has_one_format(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    data = tmp_path / "data"
    missing = runner.invoke(app, ["export", "no-such-group", "--data-dir", str(data)], obj={"embedder": embedder})
    assert missing.exit_code == 1 and ERROR_LINE.match(missing.stderr), missing.stderr
    assert missing.stderr.startswith("error (not_found): ")

    # The folder held by another process: the same shape, with its own code.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom memory.engine.folder_lock import lock_folder\n"
            f"lock_folder({str(data)!r}); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        locked = runner.invoke(app, ["search", "g", "x", "--data-dir", str(data)], obj={"embedder": embedder})
    finally:
        holder.kill()
        holder.wait()
    assert locked.exit_code == 1 and locked.stderr.startswith("error (data_folder_locked): "), locked.stderr


@pytest.mark.slow
def test_a_plain_command_prints_no_loading_bar_or_debug_lines(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    data = tmp_path / "data"
    service = Epimem.from_settings(Settings(data_dir=data), background=False, embedder=embedder)
    service.add_messages("g", "s", messages(3))
    service.flush("g", "s")
    service.close()
    result = epimem("search", "g", "message", "--data-dir", str(data), cwd=tmp_path)  # loads the model itself
    assert result.returncode == 0, result.stderr
    assert "episodes for 'message'" in result.stdout
    assert "Loading weights" not in result.stderr and "it/s" not in result.stderr
    assert "DEBUG" not in result.stderr + result.stdout


def test_a_busy_port_is_refused_before_anything_is_said_or_written(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = epimem("serve", "--port", str(port), "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: port {port} on 127.0.0.1 is already in use (another epimem serve?): " + (
        "stop it or choose --port"
    )
    assert not (tmp_path / "data").exists()  # the folder is not even created


def test_context_lists_its_citations(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    data = tmp_path / "data"
    service = Epimem.from_settings(Settings(data_dir=data), background=False, embedder=embedder)
    service.add_messages("g", "s", messages(4))
    service.flush("g", "s")
    service.close()
    result = runner.invoke(app, ["context", "g", "message", "--data-dir", str(data)], obj={"embedder": embedder})
    assert result.exit_code == 0, result.output
    count = int(re.search(r"(\d+) citations:", result.stderr).group(1))
    listed = re.findall(r"^  \[(\d+)\] \d{4}-\d{2}-\d{2} \d{2}:\d{2} s: messages (.+) \(episode ", result.stderr, re.M)
    assert count >= 1 and [int(number) for number, _ in listed] == list(range(1, count + 1))
    assert all(ids.startswith("m") for _, ids in listed)
    assert "Relevant memory" in result.stdout and "citations" not in result.stdout
    # The pieces of the text open with the markers the list names, in its order.
    assert re.findall(r"^\[(\d+)\] ", result.stdout, flags=re.M) == [number for number, _ in listed]
