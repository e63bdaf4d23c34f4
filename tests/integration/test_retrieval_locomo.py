"""The LoCoMo benchmark in short: one conversation cut to its first sessions, through the real pipeline.

The full run is `python tests/benchmarks/locomo.py` (see docs/benchmarks.md); this asserts the pipeline runs
end to end and that the context builder is sane and ahead of the BM25 single-turn baseline.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.paths import BENCHMARKS, ROOT

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder

sys.path.insert(0, str(BENCHMARKS))
import locomo  # noqa: E402

from tests.benchmarks import benchmark_data  # noqa: E402

SESSIONS = 4
BUDGETS = (200, 300)  # tight for ~80 turns: where the ranking and packing matter


def short_sample() -> locomo.Sample:
    if not locomo.LOCOMO.exists():
        pytest.fail(f"the benchmark data is missing: {locomo.LOCOMO} (set {benchmark_data.ENV})")
    # conv-30 with LoCoMo; the first conversation of the shipped dataset on a clone with nothing beside it.
    sample = locomo.load_samples(locomo.LOCOMO, [benchmark_data.sample_id(locomo.LOCOMO, "conv-30")])[0]
    kept = list(sample.locomo.sessions)[:SESSIONS]
    numbers = {name.split("_")[1] for name in kept}
    parsed = replace(
        sample.locomo,
        sessions={name: sample.locomo.sessions[name] for name in kept},
        questions=[
            q
            for q in sample.locomo.questions
            if q.category != 5 and q.evidence and all(e[1:].split(":")[0] in numbers for e in q.evidence)
        ],
    )
    turns = [t for t in sample.turns if t.dia_id[1:].split(":")[0] in numbers]
    return locomo.Sample(parsed, turns)


def test_locomo_short(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    sample = short_sample()
    assert len(sample.locomo.questions) >= 10
    service = Epimem.from_settings(data_dir=tmp_path, background=False, embedder=embedder)
    try:
        ours = locomo.service_recall(service, [sample], budgets=BUDGETS)
    finally:
        service.close()
    bm25 = locomo.baseline_recall([sample], "bm25", budgets=BUDGETS)
    assert ours.mean(200) > 0.5
    assert ours.mean(300) >= ours.mean(200)
    assert all(ours.mean(b) > bm25.mean(b) for b in BUDGETS)
    assert ours.mean(("session", 3)) > 0.6
    table = locomo.recall_table({"epimem": ours, "bm25": bm25}, budgets=BUDGETS)
    assert "| epimem |" in table


@pytest.mark.slow
def test_recall_benchmark_quick_covers_both_datasets(tmp_path: Path) -> None:
    """tests/benchmarks/recall.py --quick --mode both: both datasets through the service, flushed and as a chat app
    (two messages per add, never a flush), baselines, search recall@k, and chat minus flushed; REALTALK's short
    form holds one chat of each circle of friends (chats 1-4, chats 5-7), each circle with its own table,
    and LoCoMo's adversarial questions (category 5) have their column."""
    if benchmark_data.is_shipped(locomo.LOCOMO) or benchmark_data.realtalk_folder() is None:
        pytest.skip(
            f"needs LoCoMo and REALTALK: a folder holding {benchmark_data.LOCOMO_NAME} and "
            f"{benchmark_data.REALTALK_NAME}/, named by {benchmark_data.ENV} or at ../shared/data beside the checkout "
            f"(the data found: {locomo.LOCOMO})"
        )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", benchmark_data.ENV: str(locomo.LOCOMO), "TMPDIR": str(tmp_path)}
    command = [sys.executable, "tests/benchmarks/recall.py", "--quick", "--mode", "both"]
    command += ["--data-dir", str(tmp_path / "data")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "## locomo: conv-30" in out and "## realtalk: Chat_1_Emi_Elise, Chat_6_Vanessa_Nicolas" in out
    assert out.count("ingested chat") == 2 and out.count("ingested flushed") == 2
    for circle in ("### circle elise, emi: Chat_1_Emi_Elise", "### circle nicolas, vanessa: Chat_6_Vanessa_Nicolas"):
        assert out.count(circle) == 2, out  # one per mode
    assert out.count("| 5 adversarial |") == 3, out  # LoCoMo's table in each mode, and chat minus flushed
    # per mode: LoCoMo, REALTALK, and each of the two circles
    for label, count in (("| epimem context |", 8), ("| RRF of both, k=60 (single turns) |", 8)):
        assert out.count(label) == count, out
    assert out.count("| epimem search | all |") == 4, out
    # the dataset tables (a circle's own table holds too few questions for a floor)
    rows = [
        line
        for section in out.split("\n## ")[1:]
        for line in section.split("### circle")[0].splitlines()
        if line.startswith("| epimem context |")
    ]
    overall = [float(cell) for row in rows for cell in row.split("|")[2].split("/")]
    assert all(0.3 < value <= 1.0 for value in overall), rows
    difference = out[out.index("## chat-app mode minus flushed mode") :]
    budget_rows = [row.split("|") for row in difference.splitlines() if row.startswith("| ")]
    overall_delta = [float(cells[2]) for cells in budget_rows if cells[1].strip().replace(",", "").isdigit()]
    assert len(overall_delta) == 6 and all(delta >= -0.05 for delta in overall_delta), difference  # 3 budgets x 2
