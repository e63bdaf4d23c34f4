"""The LoCoMo benchmark in short: one conversation cut to its first sessions, through the real pipeline.

The full run is `python tests/benchmarks/locomo.py` (see docs/benchmarks.md); this asserts the pipeline runs
end to end, that the context builder is sane and ahead of the BM25 single-turn baseline, and that search scores
are on their fixed 0..1 scale without changing the ranking.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.paths import BENCHMARKS, ROOT

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder
from retrieval.search import SEARCH_POLICY, scaled

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


@pytest.fixture(scope="module")
def ingested(
    tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[tuple[Epimem, locomo.Sample]]:
    """The short conversation ingested once, through the real pipeline."""
    sample = short_sample()
    service = Epimem.from_settings(data_dir=tmp_path_factory.mktemp("locomo"), background=False, embedder=embedder)
    try:
        locomo.ingest(service, [sample])
        yield service, sample
    finally:
        service.close()


@pytest.mark.slow
def test_locomo_short(ingested: tuple[Epimem, locomo.Sample]) -> None:
    service, sample = ingested
    assert len(sample.locomo.questions) >= 10
    ours = locomo.service_recall(service, [sample], budgets=BUDGETS)
    bm25 = locomo.baseline_recall([sample], "bm25", budgets=BUDGETS)
    assert ours.mean(200) > 0.5
    assert ours.mean(300) >= ours.mean(200)
    assert all(ours.mean(b) > bm25.mean(b) for b in BUDGETS)
    assert ours.mean(("session", 3)) > 0.6
    table = locomo.recall_table({"epimem": ours, "bm25": bm25}, budgets=BUDGETS)
    assert "| epimem |" in table


@pytest.mark.slow
def test_search_scores_keep_the_ranking_and_min_score_cuts_the_tail(ingested: tuple[Epimem, locomo.Sample]) -> None:
    service, sample = ingested
    group = sample.sample_id
    latest = max(m.timestamp for messages in sample.locomo.sessions.values() for m in messages)
    requests = [{"k": 10}, {"k": 10, "recency_weight": 0.5, "reference_time": latest + timedelta(days=30)}]
    seen = []
    for question in [q.question for q in sample.locomo.questions]:
        for options in requests:
            hits = service.search(group, question, **options)
            assert hits
            for hit in hits:
                parts = hit.components
                # The raw score is the ranking score as it always was: (fused + 2.0 x evidence) x recency ...
                assert parts.raw == (parts.fused + SEARCH_POLICY.search_evidence * parts.evidence) * parts.recency
                # ... and the score is it on the one 0..1 curve, whatever the query.
                assert hit.score == scaled(parts.raw) and 0 < hit.score < 1
            # The order is the ranking by the raw score (ties by episode id), and by the score alike.
            by_raw = sorted(hits, key=lambda hit: (-hit.components.raw, hit.episode.uuid))
            assert [hit.episode.uuid for hit in hits] == [hit.episode.uuid for hit in by_raw]
            assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
            # min_score keeps the hits scoring at least it: the same hits, in the same order, less the tail.
            for threshold in (0.05, 0.1, 0.3):
                kept = service.search(group, question, min_score=threshold, **options)
                assert [h.episode.uuid for h in kept] == [h.episode.uuid for h in hits if h.score >= threshold]
            seen += [hit.components.raw for hit in hits]
    assert min(seen) < 0.5 < 2.5 < max(seen)  # the raw scores spread wide; the 0..1 scale holds them all


def sections(out: str) -> dict[str, list[str]]:
    """The output's "## name: ..." sections by dataset name (one per mode), and "difference: name" for each
    "### name" of the chat-minus-flushed part."""
    found: dict[str, list[str]] = {}
    head, _, difference = out.partition("## chat-app mode minus flushed mode")
    for section in head.split("\n## ")[1:]:
        found.setdefault(section.split(":")[0], []).append(section)
    for section in difference.split("\n### ")[1:]:
        found.setdefault("difference: " + section.split("\n")[0].strip(), []).append(section)
    return found


def overall_recall(section: str) -> list[float]:
    """The dataset table's overall figures (a circle's own table, after it, holds too few questions)."""
    row = next(line for line in section.split("### circle")[0].splitlines() if line.startswith("| epimem context |"))
    return [float(cell) for cell in row.split("|")[2].split("/")]


def overall_deltas(section: str) -> list[float]:
    rows = [row.split("|") for row in section.splitlines() if row.startswith("| ")]
    return [float(cells[2]) for cells in rows if cells[1].strip().replace(",", "").isdigit()]


@pytest.mark.slow
def test_recall_benchmark_quick_covers_every_dataset(tmp_path: Path) -> None:
    """tests/benchmarks/recall.py --quick --mode both: the datasets through the service, flushed and as a chat app
    (two messages per add, never a flush), baselines, search recall@k, and chat minus flushed; REALTALK's short
    form holds one chat of each circle of friends (chats 1-4, chats 5-7), each circle with its own table,
    LoCoMo's adversarial questions (category 5) have their column, and (where its data lies beside them) BEAM's
    short form is one batch of an assistant chat, at 1,000 / 2,000 / 4,000 tokens, ahead of single-turn RRF."""
    if benchmark_data.is_shipped(locomo.LOCOMO) or benchmark_data.realtalk_folder() is None:
        pytest.skip(
            f"needs LoCoMo and REALTALK: a folder holding {benchmark_data.LOCOMO_NAME} and "
            f"{benchmark_data.REALTALK_NAME}/, named by {benchmark_data.ENV} or at ../shared/data beside the checkout "
            f"(the data found: {locomo.LOCOMO})"
        )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", benchmark_data.ENV: str(locomo.LOCOMO), "TMPDIR": str(tmp_path)}
    with_beam = (locomo.LOCOMO.parent / "beam-dev" / "100K").is_dir()
    datasets = "locomo,realtalk" + (",beam" if with_beam else "")
    command = [sys.executable, "tests/benchmarks/recall.py", "--quick", "--mode", "both", "--datasets", datasets]
    command += ["--data-dir", str(tmp_path / "data")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    found = sections(out)
    names = ["locomo", "realtalk"] + (["beam"] if with_beam else [])
    assert sorted(k for k in found if not k.startswith("difference")) == sorted(names), list(found)
    assert all(len(found[name]) == 2 for name in names)  # one per mode
    assert "## locomo: conv-30" in out
    assert "## realtalk: Chat_1_Emi_Elise, Chat_6_Vanessa_Nicolas" in out
    assert out.count("ingested chat") == len(names) and out.count("ingested flushed") == len(names)
    for circle in ("### circle elise, emi: Chat_1_Emi_Elise", "### circle nicolas, vanessa: Chat_6_Vanessa_Nicolas"):
        assert out.count(circle) == 2, out  # one per mode
    assert out.count("| 5 adversarial |") == 3, out  # LoCoMo's table in each mode, and chat minus flushed
    # per mode: each dataset, and each of REALTALK's two circles
    for label in ("| epimem context |", "| RRF of both, k=60 (single turns) |"):
        assert out.count(label) == 2 * (len(names) + 2), out
    assert out.count("| epimem search | all |") == 2 * len(names), out
    for name in ("locomo", "realtalk"):
        assert all(0.3 < value <= 1.0 for section in found[name] for value in overall_recall(section)), found[name]
        deltas = overall_deltas(found[f"difference: {name}"][0])
        assert len(deltas) == 3 and all(delta >= -0.05 for delta in deltas), found[f"difference: {name}"]
    if with_beam:
        for section in found["beam"]:
            assert "Evidence recall at 1,000 / 2,000 / 4,000 tokens" in section
            assert "| 13 information extraction |" in section and "| 19 temporal |" in section
            stated = re.search(
                r"Stated facts in epimem's context text \((\d+) questions.*: ([\d.]+) / ([\d.]+) / ([\d.]+)", section
            )
            assert stated and int(stated[1]) > 0 and all(0.0 <= float(v) <= 1.0 for v in stated.groups()[1:]), section
            ours = overall_recall(section)
            rrf_row = next(line for line in section.splitlines() if line.startswith("| RRF of both"))
            rrf = [float(cell) for cell in rrf_row.split("|")[2].split("/")]
            assert all(0.3 < value <= 1.0 for value in ours) and all(o >= r for o, r in zip(ours, rrf, strict=True))
        assert len(overall_deltas(found["difference: beam"][0])) == 3
