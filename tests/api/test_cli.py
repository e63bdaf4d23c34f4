"""The `epimem` command line: the same commands in process on a data folder (the loaded model is handed in
through the click context object) and on a running epimem (`--url`, a real uvicorn server), and `epimem serve`
as a real process answering HTTP."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.docs_blocks import blocks
from helpers.http_client import HTTP
from helpers.paths import DOCS, ROOT
from helpers.processes import clean_env
from helpers.servers import AppServer, ServerProcess
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

runner = CliRunner()


def locomo_file(path: Path) -> Path:
    """A tiny file in the LoCoMo format: one sample, two sessions."""
    turns_1 = [
        ("Caroline", "I adopted a puppy called Rex from the shelter last weekend."),
        ("Melanie", "That's lovely! What breed is Rex?"),
        ("Caroline", "A golden retriever. He already loves the lake."),
        ("Melanie", "You should take him hiking at Lake Tahoe."),
    ]
    turns_2 = [
        ("Melanie", "I finished my sunset painting for the art show."),
        ("Caroline", "Congratulations! Which gallery is hosting it?"),
        ("Melanie", "The small gallery downtown, opening on Friday."),
    ]
    conversation: dict = {"speaker_a": "Caroline", "speaker_b": "Melanie"}
    for number, (turns, date) in enumerate(
        [(turns_1, "1:56 pm on 8 May, 2023"), (turns_2, "10:00 am on 25 May, 2023")], start=1
    ):
        conversation[f"session_{number}_date_time"] = date
        conversation[f"session_{number}"] = [
            {"speaker": speaker, "dia_id": f"D{number}:{index + 1}", "text": text}
            for index, (speaker, text) in enumerate(turns)
        ]
    path.write_text(json.dumps([{"sample_id": "conv-t", "conversation": conversation, "qa": []}]))
    return path


@pytest.fixture(params=["folder", "url"])
def where(request: pytest.FixtureRequest, tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[list[str]]:
    """The options that name the memory: a data folder in process, or a running epimem on its own folder."""
    if request.param == "folder":
        yield ["--data-dir", str(tmp_path / "data")]
        return
    service = Epimem.from_settings(Settings(data_dir=tmp_path / "served"), background=False, embedder=embedder)
    try:
        with AppServer(service) as server:
            yield ["--url", server.url]
    finally:
        service.close()


def run(embedder: SentenceTransformerEmbedder, *args: str) -> str:
    result = runner.invoke(app, list(args), obj={"embedder": embedder})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def test_the_pages_data_folder_commands_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: SentenceTransformerEmbedder
) -> None:
    """docs/cli.md's commands on a data folder, line by line as a reader types them (in process, with the loaded
    model): the import finds the marathon, the timeline lands in a file, and an export imported into another group
    holds every message of the first."""
    (block,) = blocks(__file__, "bash", DOCS / "cli.md")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EPIMEM_URL", raising=False)
    printed = []
    for line in block.splitlines():
        words = shlex.split(line.split("  #")[0])
        assert words[0] == "epimem", line
        target = words[words.index(">") + 1] if ">" in words else None
        output = run(embedder, *(words[1 : words.index(">")] if target else words[1:]))
        if target:
            Path(target).write_text(output)
        else:
            printed.append(output)
    assert "Rotterdam" in printed[1], printed[1]
    timeline = json.loads(Path("timeline.json").read_text())
    assert timeline["episodes"] and all(e["session_id"] == "session_1" for e in timeline["episodes"])
    exported = [json.loads(line) for line in Path("demo-1.jsonl").read_text().splitlines()]
    messages = [line for line in exported if line["type"] == "message"]
    stats = json.loads(run(embedder, "stats", "--json", "--data-dir", "./cli-data"))
    counts = {group["group_id"]: group for group in stats["groups"]}
    assert {"epimem-demo-1", "demo-copy"} <= set(counts) and "epimem-demo-1" in printed[-1]
    assert counts["demo-copy"]["messages"] == counts["epimem-demo-1"]["messages"] == len(messages) > 0


@pytest.mark.slow
def test_import_is_idempotent_and_everything_reads_back(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, where: list[str]
) -> None:
    data = where
    source = locomo_file(tmp_path / "locomo.json")
    first = json.loads(run(embedder, "import", str(source), *data, "--json"))
    assert first["kind"] == "locomo" and first["groups"] == ["conv-t"] and first["messages"] == 7
    assert first["episodes"] >= 2
    again = json.loads(run(embedder, "import", str(source), *data, "--json"))
    assert again["episodes"] == 0  # a re-run adds nothing

    hits = json.loads(run(embedder, "search", "conv-t", "Which dog did Caroline adopt?", *data, "--json", "-k", "2"))
    assert hits and "Rex" in hits[0]["episode"]["content"]
    scores = [hit["score"] for hit in hits]
    assert all(0 < score < 1 for score in scores) and scores == sorted(scores, reverse=True)
    above = json.loads(
        run(
            embedder,
            "search",
            "conv-t",
            "Which dog did Caroline adopt?",
            *data,
            "--json",
            "-k",
            "2",
            "--min-score",
            str(scores[0]),
        )
    )
    assert [hit["episode"]["uuid"] for hit in above] == [
        hit["episode"]["uuid"] for hit in hits if hit["score"] >= scores[0]
    ]
    refused = runner.invoke(app, ["search", "conv-t", "dog", *data, "--min-score", "1.5"], obj={"embedder": embedder})
    assert refused.exit_code == 2 and "--min-score" in refused.output
    table = run(embedder, "search", "conv-t", "sunset painting", *data)
    assert "conv-t" not in table and "session_2" in table  # a table of episodes, by session

    page = json.loads(run(embedder, "timeline", "conv-t", *data, "--json"))
    times = [e["timestamp"] for e in page["episodes"]]
    assert len(times) == first["episodes"] and times == sorted(times)
    only = json.loads(run(embedder, "timeline", "conv-t", *data, "--session", "session_2", "--json"))
    assert {e["session_id"] for e in only["episodes"]} == {"session_2"}
    assert "session_1" in run(embedder, "timeline", "conv-t", *data)

    context = json.loads(run(embedder, "context", "conv-t", "Where could Rex go hiking?", *data, "--json"))
    assert 0 < context["tokens"] <= 1000 and context["citations"]
    assert "Rex" in run(embedder, "context", "conv-t", "Where could Rex go hiking?", *data, "--budget", "200")

    export = tmp_path / "conv-t.jsonl"
    run(embedder, "export", "conv-t", *data, "--output", str(export))
    lines = export.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "header" and json.loads(lines[-1])["type"] == "end"
    copied = json.loads(run(embedder, "import", str(export), *data, "--group", "conv-copy", "--json"))
    assert copied["kind"] == "export" and copied["groups"] == ["conv-copy"]
    assert copied["episodes"] == first["episodes"]

    messages = tmp_path / "messages.jsonl"
    messages.write_text(
        "\n".join(
            json.dumps(
                {
                    "group_id": "team",
                    "session_id": "chat",
                    "id": f"j{i}",
                    "content": f"Line {i} about a boat",
                    "timestamp": f"2023-06-01T10:0{i}:00Z",
                }
            )
            for i in range(3)
        )
    )
    imported = json.loads(run(embedder, "import", str(messages), *data, "--json"))
    assert imported["kind"] == "messages" and imported["messages"] == 3 and imported["episodes"] >= 1
    assert json.loads(run(embedder, "import", str(messages), *data, "--json"))["episodes"] == 0

    stats = json.loads(run(embedder, "stats", *data, "--json"))
    groups = {row["group_id"]: row for row in stats["groups"]}
    assert set(groups) == {"conv-t", "conv-copy", "team"}
    assert groups["conv-t"]["sessions"] == 2 and groups["conv-t"]["messages"] == 7
    assert groups["conv-t"]["episodes"] == groups["conv-copy"]["episodes"] == first["episodes"]
    assert "conv-copy" in run(embedder, "stats", *data)

    if where[0] == "--data-dir":  # a command of the data folder only
        reembedded = json.loads(run(embedder, "reembed", *data, "--json"))
        assert reembedded["vectors"] == 0 and reembedded["skipped_collections"] > 0  # already on this model


def test_a_timestamp_in_milliseconds_is_one_clear_line(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, where: list[str]
) -> None:
    """In a file to import (checked where the messages are added: the facade, or the server) and as a timeline
    bound (checked here), on either side: one line that says what to do, never pydantic's report."""
    lines = tmp_path / "ms.jsonl"
    lines.write_text(json.dumps({"group_id": "g", "session_id": "s", "id": "1", "content": "hi", "timestamp": 1e12}))
    imported = runner.invoke(app, ["import", str(lines), *where], obj={"embedder": embedder})
    assert imported.exit_code == 1, imported.output
    error = imported.stderr.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith("error (invalid_input): ") and "milliseconds" in error, imported.stderr
    assert "pydantic" not in imported.stderr and "validation error" not in imported.stderr
    bound = runner.invoke(app, ["timeline", "g", "--start", "1700000000000", *where], obj={"embedder": embedder})
    assert bound.exit_code == 2 and bound.stderr.count("\n") == 1 and "milliseconds" in bound.stderr


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    bad = runner.invoke(app, ["search", "g", "x", *data, "-k", "0"], obj={"embedder": embedder})
    assert bad.exit_code == 2  # typer refuses k < 1
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"group_id": "g", "session_id": "s", "id": "1"}\n')
    failed = runner.invoke(app, ["import", str(broken), *data], obj={"embedder": embedder})
    assert failed.exit_code == 1 and "line 1" in failed.output and failed.exception is not None
    assert not isinstance(failed.exception, ValueError)
    missing = runner.invoke(app, ["export", "no-such-group", *data], obj={"embedder": embedder})
    assert missing.exit_code == 1 and "not_found" in missing.output


def test_serve_refuses_to_leave_this_machine_without_keys(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "refusing to bind" in result.output
    embedded = runner.invoke(app, ["serve", "--workers", "2", "--data-dir", str(tmp_path)])
    assert embedded.exit_code == 2 and "Chroma server" in embedded.output


@pytest.mark.slow  # starts its own process (model load / a Chroma server)
def test_epimem_serve_answers_http(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    server = ServerProcess.serve(env=clean_env(EPIMEM_DATA_DIR=str(tmp_path / "data")), log=log)
    with server:
        port = server.port
        base = f"{server.url}/v1/groups/team"
        added = HTTP.post(
            f"{base}/sessions/chat/messages",
            json={"messages": [{"id": "1", "content": "Ana adopted a dog called Rex."}]},
            headers={"x-request-id": "cli-test-1"},
        )
        assert added.status_code == 200 and added.headers["x-request-id"] == "cli-test-1"
        assert HTTP.post(f"{base}/sessions/chat/flush", timeout=60).json()["episodes"]
    process = server.process
    text = log.read_text()
    assert "local mode" in text and f"127.0.0.1:{port}" in text
    access = [json.loads(line) for line in text.splitlines() if line.startswith("{") and '"epimem.access"' in line]
    assert any(line["request_id"] == "cli-test-1" and line["status"] == 200 for line in access)
    assert "Rex" not in "\n".join(json.dumps(line) for line in access)  # message content is never logged
    # SIGTERM: uvicorn shuts down cleanly, then re-raises the signal it captured.
    assert process.returncode in (0, -15) and "Finished server process" in text, text[-2000:]


MELANIE = {"D1:2", "D1:4", "D2:1", "D2:3"}  # the ids of Melanie's turns in locomo_file


@pytest.mark.slow
def test_correct_revisions_redact_audit_and_speaker_filters(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, where: list[str]
) -> None:
    data = where
    run(embedder, "import", str(locomo_file(tmp_path / "locomo.json")), *data, "--json")
    page = json.loads(run(embedder, "timeline", "conv-t", *data, "--json"))
    episode = page["episodes"][0]
    session, episode_id = episode["session_id"], episode["uuid"]
    corrected = json.loads(
        run(
            embedder,
            "correct",
            "conv-t",
            session,
            episode_id,
            "--title",
            "Rex comes home",
            "--reason",
            "r",
            *data,
            "--json",
        )
    )
    assert corrected["title"] == "Rex comes home"
    history = json.loads(run(embedder, "revisions", "conv-t", session, episode_id, *data, "--json"))
    assert [(r["kind"], r["changed_by"]) for r in history] == [("generated", "epimem"), ("correction", "local")]
    assert "Rex comes home" in run(embedder, "revisions", "conv-t", session, episode_id, *data)

    message = episode["source_message_ids"][0]
    refused = runner.invoke(app, ["redact", "conv-t", session, message, *data], obj={"embedder": embedder}, input="n\n")
    assert refused.exit_code != 0 and "for good" in refused.output
    receipt = json.loads(run(embedder, "redact", "conv-t", session, message, "--yes", *data, "--json"))
    assert receipt["redacted"] is True and receipt["episodes"] == [episode_id]
    assert "redacted already" in run(embedder, "redact", "conv-t", session, message, "--yes", *data)

    trail = json.loads(run(embedder, "audit", "conv-t", *data, "--json"))
    assert [e["action"] for e in trail["entries"][:2]] == ["redact", "correct"]
    hits = json.loads(run(embedder, "search", "conv-t", "painting gallery", "--speaker", "Melanie", *data, "--json"))
    assert hits and all(m.startswith("D2") or m.startswith("D1") for h in hits for m in h["matched_message_ids"])
    text = run(embedder, "context", "conv-t", "Rex painting gallery", "--speaker", "Melanie", *data)
    assert "Melanie:" in text and "Caroline:" not in text
