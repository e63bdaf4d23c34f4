"""The short form of every benchmark script runs to the end and prints its figures.

Timing targets are not asserted here (CI machines are noisy); the README holds the full runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import BENCHMARKS, ROOT

from tests.benchmarks.benchmark_data import ENV, locomo_file

# EPIMEM_BENCHMARK_DATA, else ../shared/data (CI), else the shipped examples/conversations.json.
LOCOMO = locomo_file()

# script -> figure labels its output must contain
EXPECTED = {
    "partitions.py": [
        "creation per partition (ms)",
        "rss during/after creation MB",
        "search session_facade (ms)",
        "search group_raw (ms)",
        "ratio facade/raw p50",
        "rss start / loaded / after MB",
    ],
    "query.py": [
        "session facade (ms)",
        "group raw (one collection) (ms)",
        "ratio session p50 facade/raw",
        "ratio group p95 facade/raw",
        "query embedding hit (ms)",
    ],
    "ingest.py": ["ingest (s)", "texts embedded", "encode-only (s)", "ratio ingest / encode-only"],
    "big_group.py": [
        "first search after a start, read from Chroma (s)",
        "first search after a start, snapshot kept at the last close (s)",
        "idle search (ms)",
        "written context (ms)",
        "read cache",
    ],
    "ingest_growth.py": [
        "chat (2 per call): msg/s, median call",
        "bulk (100 per call + flush): msg/s, median call",
        "ratio big / empty (target >= 0.9)",
    ],
    "fill.py": [
        "rate per tenth (msg/s)",
        "ratio last / first tenth",
        "first search after a restart (s)",
        "ratio to the floor",
        "the next ones (other questions)",
    ],
    "kept_snapshot.py": [
        "without a kept file: beyond the Chroma read (s)",
        "kept at close (s, MB)",
        "with the kept file: loaded (s)",
    ],
    "record_format.py": [
        "write CPU per partition (ms)",
        "ratio document / body: write",
        "ratio keys / body: write",
        "ratio payload / body: write",
    ],
    "score_scale.py": [
        "raw score, hits with evidence",
        "fitted slope",
        "| min_score | evidence hits kept |",
    ],
    "keyword_patch.py": [
        "bm25s rebuild (ms)",
        "postings build (ms)",
        "postings patch (ms)",
        "ratio rebuild / add patch",
    ],
}
# embedding_backends.py is not run here: its ONNX export alone takes minutes on 2 cores. The
# backends' correctness is tested in tests/memory/test_embedding_backends.py; the script is run by hand.
NEEDS_LOCOMO = {"ingest.py", "keyword_patch.py", "kept_snapshot.py", "big_group.py", "fill.py"}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_benchmark_short_form(script: str, tmp_path: Path) -> None:
    if script in NEEDS_LOCOMO and not LOCOMO.exists():
        pytest.fail(f"{script} needs the benchmark data at {LOCOMO} ({ENV})")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", ENV: str(LOCOMO), "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for label in EXPECTED[script]:
        assert label in result.stdout, f"{script} did not print {label!r}:\n{result.stdout[-3000:]}"
    figures = [row for row in result.stdout.splitlines() if "=" in row]
    assert all("nan" not in row for row in figures), "\n".join(figures)
