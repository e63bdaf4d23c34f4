"""The command line on a running epimem (``--url`` / ``EPIMEM_URL``, ``--key`` / ``EPIMEM_API_KEY``): a real
uvicorn server, the commands through the thin client, no model and no Chroma loaded in the command's process, one
line for every error, what was just said on the timeline; and the thin client's own ``epimem``, which says what
needs the server install."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.paths import ROOT
from helpers.processes import clean_env
from helpers.servers import AppServer
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.settings import Settings
from epimem_client import EpimemClient
from epimem_client.cli.app import app as thin_app
from memory.embedding.embedder import SentenceTransformerEmbedder

runner = CliRunner()
KEYS = [
    {"key": "team-a-writer-0123456789", "groups": ["team-a"], "role": "write"},
    {"key": "team-b-admin-01234567890", "groups": ["team-b"], "role": "admin"},
    {"key": "team-a-admin-01234567890", "groups": ["team-a"], "role": "admin"},
]
WRITER, OTHER, ADMIN = KEYS[0]["key"], KEYS[1]["key"], KEYS[2]["key"]
SAID = [
    {
        "id": "1",
        "producer_id": "Caroline",
        "timestamp": "2023-05-08T13:56:00Z",
        "content": "I adopted a dog called Rex.",
    },
    {"id": "2", "producer_id": "Melanie", "timestamp": "2023-05-08T13:57:00Z", "content": "Take Rex to Lake Tahoe!"},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    """A server with keys; team-a holds one session that was never flushed."""
    folder = tmp_path_factory.mktemp("cli-remote")
    keys = folder / "keys.json"
    keys.write_text(json.dumps({"keys": KEYS}))
    settings = Settings(data_dir=folder / "data", api_keys_file=keys)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    service.add_messages("team-a", "chat-1", SAID)
    try:
        with AppServer(service, settings=settings) as running:
            yield running
    finally:
        service.close()


def cli(*args: str, **env: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"EPIMEM_URL": None, "EPIMEM_API_KEY": None, **env})
    return result.exit_code, result.stdout, result.stderr


def test_the_timeline_shows_what_was_just_said(server: AppServer) -> None:
    code, out, _ = cli("timeline", "team-a", "--url", server.url, "--key", WRITER, "--json")
    assert code == 0
    page = json.loads(out)
    assert [e["source_message_ids"] for e in page["episodes"]] == [["1", "2"]]
    assert page["pending"] == [page["episodes"][0]["uuid"]]
    code, table, _ = cli("timeline", "team-a", "--url", server.url, "--key", WRITER)
    assert code == 0 and "(pending)" in table and "chat-1" in table
    code, hits, _ = cli("search", "team-a", "Who has a dog?", "--url", server.url, "--key", WRITER, "--json")
    assert code == 0 and json.loads(hits)[0]["pending"] is True


def test_url_and_key_come_from_the_environment(server: AppServer, tmp_path: Path) -> None:
    code, out, _ = cli("stats", "--json", EPIMEM_URL=server.url, EPIMEM_API_KEY=WRITER)
    assert code == 0
    assert [(g["group_id"], g["messages"], g["pending"]) for g in json.loads(out)["groups"]] == [("team-a", 2, 2)]
    # A data folder named on the command line wins over the URL of the environment.
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    code, _, err = cli("stats", "--data-dir", str(not_a_folder), EPIMEM_URL=server.url)
    assert code == 1 and "is a file, not a folder" in err
    code, _, err = cli("stats", "--url", server.url, "--data-dir", "elsewhere")
    assert code == 2 and err.strip() == "error: give --url or --data-dir, not both"


def test_every_error_is_one_line(server: AppServer, tmp_path: Path) -> None:
    cases = [
        (("search", "team-a", "dog"), "error (unauthorized): "),  # no key
        (("search", "team-b", "dog", "--key", WRITER), "error (forbidden): "),  # another group's
        (("timeline", "team-a", "--key", WRITER, "--start", "1683554160000"), "error: --start 1683554160000: "),
        (("timeline", "team-a", "--key", WRITER, "--start", "in a while"), "error (invalid_input): "),
        (("export", "team-b", "--key", OTHER), "error (not_found): "),
    ]
    for args, start in cases:
        code, _, err = cli(*args, "--url", server.url)
        assert code in (1, 2) and err.startswith(start) and err.count("\n") == 1, (args, err)
    assert "milliseconds" in cli("timeline", "team-a", "--url", server.url, "--start", "1683554160000")[2]
    # Seconds since 1970 are read as such.
    code, out, _ = cli("timeline", "team-a", "--url", server.url, "--key", WRITER, "--end", "1683554100", "--json")
    assert code == 0 and json.loads(out)["episodes"] == []  # the open episode starts at 13:56
    nobody = "http://127.0.0.1:9"  # the discard port: nothing answers
    code, _, err = cli("stats", "--url", nobody)
    assert code == 1 and err.startswith("error (server_unreachable): no epimem answered at") and err.count("\n") == 1


def test_import_export_and_corrections_go_through_the_server(server: AppServer, tmp_path: Path) -> None:
    lines = [{"group_id": "team-a", "session_id": "imported", **message} for message in SAID]
    source = tmp_path / "messages.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    auth = ("--url", server.url, "--key", WRITER)
    code, out, err = cli("import", str(source), *auth, "--json")
    assert code == 0, err
    assert json.loads(out) == {"kind": "messages", "groups": ["team-a"], "sessions": 1, "messages": 2, "episodes": 1}
    with EpimemClient(server.url, api_key=WRITER) as client:
        episode = client.timeline("team-a", session_id="imported").episodes[0]
    code, out, _ = cli("correct", "team-a", "imported", episode.uuid, "--title", "Rex comes home", *auth, "--json")
    assert code == 0 and json.loads(out)["title"] == "Rex comes home"
    code, _, err = cli("audit", "team-a", *auth, "--json")
    assert code == 1 and err.startswith("error (forbidden): ")  # the audit trail needs an admin key
    code, out, _ = cli("audit", "team-a", "--url", server.url, "--key", ADMIN, "--json")
    assert code == 0 and json.loads(out)["entries"][0]["action"] == "correct"
    code, out, _ = cli("export", "team-b", "--url", server.url, "--key", OTHER)
    assert code == 1  # nothing in team-b


def test_a_command_on_a_running_epimem_loads_no_model_and_no_chroma(server: AppServer, tmp_path: Path) -> None:
    """The server install's `epimem` (api.cli.entry), each data command in one process: they answer through the
    thin client, and neither torch, chromadb nor anything of the service (memory, retrieval, the facade, the
    settings) is ever imported."""
    exported = tmp_path / "team-a.jsonl"
    commands = [
        ["search", "team-a", "Who has a dog?"],
        ["context", "team-a", "Where could Rex go?"],
        ["timeline", "team-a"],
        ["stats"],
        ["export", "team-a", "--output", str(exported)],
    ]
    code = (
        "import json, sys\n"
        "from api.cli.entry import main\n"
        "codes, url, key = [], sys.argv[1], sys.argv[2]\n"
        f"for args in {commands!r}:\n"
        "    sys.argv = ['epimem', *args, '--url', url, '--key', key]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as done:\n"
        "        codes.append(done.code)\n"
        "heavy = ('torch', 'chromadb', 'sentence_transformers', 'numpy', 'fastapi', 'api.facade', 'api.settings')\n"
        "loaded = [name for name in heavy if name in sys.modules]\n"
        "loaded += [name for name in sys.modules if name.split('.')[0] in ('memory', 'retrieval')]\n"
        "print(json.dumps([codes, loaded]), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, server.url, ADMIN],  # export needs an admin key
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    codes, loaded = json.loads(result.stderr.strip().splitlines()[-1])
    assert codes == [0] * len(commands) and loaded == []
    assert "Rex" in result.stdout and exported.read_text().count("\n") > 2


def test_the_thin_clients_command_line_says_what_needs_the_server(server: AppServer, tmp_path: Path) -> None:
    def thin(*args: str) -> tuple[int, str]:
        result = runner.invoke(thin_app, list(args), env={"EPIMEM_URL": None, "EPIMEM_API_KEY": None})
        return result.exit_code, result.stderr

    code, err = thin("serve", "--port", "8001")
    assert code == 2 and "`epimem serve` runs epimem itself: it needs the server install" in err
    code, err = thin("search", "team-a", "dog")
    assert code == 2 and err.startswith("error: give --url (or EPIMEM_URL) of a running epimem")
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([{"sample_id": "x", "conversation": {}, "qa": []}]))
    code, err = thin("import", str(locomo), "--url", server.url, "--key", WRITER)
    assert code == 1 and "a locomo file, which only the server install reads" in err
    result = runner.invoke(thin_app, ["timeline", "team-a", "--url", server.url, "--key", WRITER, "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["pending"]
