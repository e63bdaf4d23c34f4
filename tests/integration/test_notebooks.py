"""The notebooks run top to bottom in the project's kernel, and are kept without outputs; the small
helpers they import (api.notebook) behave as documented."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers.paths import ROOT
from nbclient import NotebookClient

import api.notebook as notebook
from api.facade import Epimem
from api.notebook import all_episodes, episode_rows, episode_vectors, first_sessions, project_2d
from memory.ingest.importers import read_locomo
from tests.benchmarks import benchmark_data

NOTEBOOKS = ROOT / "notebooks"
# Seconds each notebook may take in all (a guard against hangs: on 2 free cores they take about a
# quarter of this), and the figures it must show.
BUDGETS = {
    "01_quickstart.ipynb": (240, 0),
    "02_timeline_explorer.ipynb": (420, 2),
    "03_retrieval_quality.ipynb": (600, 3),
    "04_assistant_chat.ipynb": (300, 2),
}


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_the_notebooks_are_there_and_stored_without_outputs() -> None:
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == sorted(BUDGETS)
    for name in BUDGETS:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3", name
        for cell in code_cells(nb):
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: strip the outputs"
            assert "execution" not in cell.metadata, f"{name}: strip execution timing metadata"


# The notebooks that ingest a whole conversation run here on its first sessions: the same code on a third
# of the data (each notebook's MAX_SESSIONS, set by a cell put after its first one, as papermill does); BEAM's
# chat on its first batch (~60 messages of pages).
MAX_SESSIONS = 6
MAX_SESSIONS_OF = {"04_assistant_chat.ipynb": 1}


def run_notebook(name: str) -> nbformat.NotebookNode:
    """Execute every cell in order with the `python3` kernel, in the notebooks folder, within the
    notebook's time budget. The environment's kernelspec (argv "python", which jupyter_client runs
    as this interpreter) is looked up first, ahead of any user-wide `python3` kernel."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    first = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    if "MAX_SESSIONS = None" in nb.cells[first].source:
        cut = MAX_SESSIONS_OF.get(name, MAX_SESSIONS)
        nb.cells.insert(first + 1, nbformat.v4.new_code_cell(f"MAX_SESSIONS = {cut}"))
    budget, _ = BUDGETS[name]
    client = NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    deadline = time.monotonic() + budget
    client.reset_execution_trackers()
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"{name} ran past its {budget} s budget before cell {index}")
            client.timeout = int(remaining) + 1
            client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_notebook_runs_top_to_bottom(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    own = str(Path(sys.prefix) / "share" / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(p for p in (own, os.environ.get("JUPYTER_PATH")) if p))
    nb = run_notebook(name)  # a cell that raises fails here with its traceback
    cells = code_cells(nb)
    assert all(cell.execution_count is not None for cell in cells)
    streams = "".join(out.get("text", "") for cell in cells for out in cell.outputs if out.output_type == "stream")
    kernel_lines = [line for line in streams.splitlines() if line.startswith("kernel: ")]
    assert kernel_lines, f"{name} must print the kernel's interpreter"
    # The kernel is the Python of the environment running the tests (the project's .venv).
    assert Path(kernel_lines[0].removeprefix("kernel: ")).parent == Path(sys.executable).parent
    figures = [out for cell in cells for out in cell.outputs if "image/png" in out.get("data", {})]
    assert len(figures) >= BUDGETS[name][1], f"{name} showed {len(figures)} figures"


# -- api.notebook ----------------------------------------------------------------------------------


def test_benchmark_data_variable_wins(tmp_path: Path) -> None:
    data = tmp_path / "elsewhere.json"
    data.write_text("[]")
    env = {benchmark_data.ENV: str(data)}
    assert benchmark_data.locomo_file(tmp_path, env) == data
    assert benchmark_data.data_folder(tmp_path, env) == tmp_path
    folder = tmp_path / "shared-copy"
    (folder / "realtalk-dev").mkdir(parents=True)
    (folder / "locomo-dev.json").write_text("[]")
    env = {benchmark_data.ENV: str(folder)}
    assert benchmark_data.locomo_file(tmp_path, env) == folder / "locomo-dev.json"
    assert benchmark_data.realtalk_folder(tmp_path, env) == folder / "realtalk-dev"
    missing = {benchmark_data.ENV: str(tmp_path / "missing.json")}
    with pytest.raises(FileNotFoundError, match=benchmark_data.ENV):
        benchmark_data.locomo_file(tmp_path, missing)
    with pytest.raises(FileNotFoundError, match=benchmark_data.ENV):
        benchmark_data.data_folder(tmp_path, missing)


def test_benchmark_data_beside_the_repository_else_the_shipped_dataset(tmp_path: Path) -> None:
    clone = tmp_path / "some-clone"  # a fresh clone with nothing beside it
    clone.mkdir()
    shipped = benchmark_data.locomo_file(clone, {})
    assert shipped == clone / "examples" / "conversations.json" and benchmark_data.is_shipped(shipped)
    assert benchmark_data.data_folder(clone, {}) is None and benchmark_data.realtalk_folder(clone, {}) is None
    beside = tmp_path / "shared" / "data" / "locomo-dev.json"
    beside.parent.mkdir(parents=True)
    beside.write_text("[]")
    assert benchmark_data.locomo_file(clone, {}) == beside and not benchmark_data.is_shipped(beside)
    assert benchmark_data.data_folder(clone, {}) == beside.parent


def test_the_shipped_dataset_is_locomo_shaped_with_answerable_questions() -> None:
    samples = read_locomo(benchmark_data.SHIPPED)
    assert len(samples) >= 2
    for sample in samples:
        assert len(sample.sessions) >= 3 and len(sample.messages) >= 36
        ids = {message.id for message in sample.messages}
        assert len(sample.questions) >= 15
        assert {q.category for q in sample.questions} == {1, 2, 3, 4}
        for question in sample.questions:
            assert question.evidence and set(question.evidence) <= ids, question.question
    assert benchmark_data.sample_id(benchmark_data.SHIPPED, "conv-26") == samples[0].sample_id


def locomo_file(tmp_path: Path) -> Path:
    def turns(session: int, count: int) -> list[dict[str, str]]:
        return [
            {"speaker": "Ann" if i % 2 else "Bob", "dia_id": f"D{session}:{i}", "text": f"turn {i}"}
            for i in range(1, count + 1)
        ]

    sample = {
        "sample_id": "s-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            **{f"session_{n}": turns(n, 3) for n in (1, 2, 3)},
            **{f"session_{n}_date_time": f"1:00 pm on {n} May, 2023" for n in (1, 2, 3)},
        },
        "qa": [
            {"question": "in one", "answer": "a", "evidence": ["D1:1"], "category": 4},
            {"question": "across", "answer": "b", "evidence": ["D1:2", "D3:1"], "category": 1},
            {"question": "in two", "answer": "c", "evidence": ["D2:03"], "category": 2},
            {"question": "none", "adversarial_answer": "d", "evidence": [], "category": 5},
        ],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


def test_first_sessions_keeps_the_questions_answerable_from_them(tmp_path: Path) -> None:
    (sample,) = read_locomo(locomo_file(tmp_path))
    cut = first_sessions(sample, 2)
    assert list(cut.sessions) == ["session_1", "session_2"]
    assert [q.question for q in cut.questions] == ["in one", "in two"]
    assert first_sessions(sample, None) is sample and first_sessions(sample, 3) is sample
    assert len(sample.sessions) == 3 and len(sample.questions) == 4  # the original is untouched


def test_project_2d_finds_the_main_directions() -> None:
    rng = np.random.default_rng(0)
    along = rng.normal(size=(50, 1)) * 10
    across = rng.normal(size=(50, 1))
    points = np.hstack([along, across, np.zeros((50, 3))]) @ np.linalg.qr(rng.normal(size=(5, 5)))[0]
    projected = project_2d(points)
    assert projected.shape == (50, 2)
    assert np.allclose(projected.mean(axis=0), 0, atol=1e-9)
    assert abs(np.corrcoef(projected[:, 0], along[:, 0])[0, 1]) > 0.999
    assert abs(np.corrcoef(projected[:, 1], across[:, 0])[0, 1]) > 0.99
    assert project_2d(np.ones((1, 4))).shape == (1, 2)
    assert project_2d(np.arange(6.0).reshape(6, 1)).shape == (6, 2)
    with pytest.raises(ValueError):
        project_2d(np.ones(3))


@pytest.mark.slow
def test_episodes_rows_and_vectors_come_from_the_store(
    service: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = datetime(2023, 5, 1, 12, tzinfo=UTC)
    topics = {"s-b": "planting tomatoes in the garden", "s-a": "sailing a boat on the lake", "s-c": "baking bread"}
    for day, (session, topic) in enumerate(topics.items()):
        messages = [
            {"id": f"{session}-{i}", "content": f"Part {i}: we talked about {topic}.", "producer_id": "ann"}
            | {"timestamp": (start + timedelta(days=day, minutes=i)).isoformat()}
            for i in range(3)
        ]
        service.add_messages(group_id, session, messages)
        service.flush(group_id, session)
    service.add_messages("other-" + group_id, "s-a", [{"id": "x", "content": "elsewhere", "producer_id": "zed"}])
    service.flush("other-" + group_id, "s-a")

    monkeypatch.setattr(notebook, "MAX_TIMELINE_LIMIT", 2)  # force several timeline pages
    episodes = all_episodes(service, group_id)
    assert [e.session_id for e in episodes] == ["s-b", "s-a", "s-c"]  # time order, every page
    assert [e.session_id for e in all_episodes(service, group_id, time="2023-05-02")] == ["s-a"]

    rows = episode_rows(episodes)
    assert [row["messages"] for row in rows] == [3, 3, 3]
    assert rows[0]["first_message"] == "s-b-0" and rows[0]["last_message"] == "s-b-2"
    assert rows[0]["uuid"] == episodes[0].uuid and rows[0]["timestamp"] == start

    found = episode_vectors(service, group_id)
    assert [e.uuid for e in found.episodes] == [e.uuid for e in episodes]
    assert found.vectors.shape == (3, service.embedder.dimension)
    assert np.allclose(np.linalg.norm(found.vectors, axis=1), 1, atol=1e-3)
    sailing = service.embedder.embed_batch(["sailing on a lake"])[0]
    assert int(np.argmax(found.vectors @ sailing)) == 1  # each stored vector is about its own episode
    assert episode_vectors(service, "empty-" + group_id).vectors.shape == (0, service.embedder.dimension)


def test_the_shipped_assistant_chat_is_beam_shaped_with_answerable_questions() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    from tests.benchmarks.beam import SHIPPED_CHAT, STATED, fact_share, load_chat

    sample = load_chat(SHIPPED_CHAT).locomo
    roles = {message.role.value for message in sample.messages}
    assert len(sample.sessions) == 3 and roles == {"user", "assistant"}
    assert max(len(m.content) for m in sample.messages if m.role.value == "assistant") > 1000  # held as excerpts
    ids = {message.id for message in sample.messages}
    assert len(sample.questions) >= 5 and all(q.evidence and set(q.evidence) <= ids for q in sample.questions)
    stamps = [message.timestamp for messages in sample.sessions.values() for message in messages]
    assert stamps == sorted(stamps) and stamps[0].isoformat() == "2024-03-15T09:00:00+00:00"
    # What an answer should state, from the rubric ("should state", not "should mention"): found in what says it
    stated = STATED[sample.sample_id]
    assert stated["When does my first sprint end?"] == ("March 29",)
    assert set(stated) == {q.question for q in sample.questions}
    said = {message.id: message.content for message in sample.messages}
    for question in sample.questions:
        facts = stated[question.question]
        assert fact_share(facts, " ".join(said[i] for i in question.evidence)) == 1.0, question.question
        assert fact_share(facts, "The weather was grey all week.") == 0.0
