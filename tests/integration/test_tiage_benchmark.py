"""The TIAGE benchmark's short form (tests/benchmarks/tiage.py --quick): it runs to the end, the
reference methods come out as in ../shared/data/README.md, and epimem's scorer beats them. Skipped
where the TIAGE data is absent (a user's clone has no ../shared); CI has it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from helpers.paths import BENCHMARKS, ROOT

sys.path.insert(0, str(BENCHMARKS))
from tiage import tiage_folder  # noqa: E402

TIAGE = tiage_folder()


def figure(output: str, row: str, name: str) -> float:
    line = next(line for line in output.splitlines() if line.strip().startswith(row))
    found = re.search(rf"\b{name} = ([0-9.]+)", line)
    assert found, line
    return float(found.group(1))


@pytest.mark.slow
@pytest.mark.skipif(
    not (TIAGE / "anno_dev.json").is_file(),
    reason=f"no {TIAGE / 'anno_dev.json'}: set EPIMEM_TIAGE, or EPIMEM_BENCHMARK_DATA to a folder holding tiage/",
)
def test_tiage_short_form_reports_the_scorer_beside_the_references() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "tiage.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "(20 dialogues" in out and "nan" not in out
    # the reference methods, recomputed on the same 20 dialogues
    assert figure(out, "a boundary every 4 turns", "placed") == 61  # 3 per 14-16 turns, 4 for one of 18
    assert figure(out, "1 - cosine of adjacent turns", "AP") < figure(out, "epimem scorer", "AP")
    scorer = "epimem scorer + selection, chosen on train"
    assert figure(out, scorer, "F1") > figure(out, "TextTiling over MiniLM", "F1")
    assert figure(out, scorer, "F1") > figure(out, "cosine of 3-turn windows", "F1")
    assert figure(out, scorer, "Pk") < figure(out, "a boundary every 4 turns", "Pk")
    # the granularity chosen on train, its cross-validated train figures beside the ones measured here
    chosen = out[out.index("chosen on train (") :]
    assert len(re.findall(r"dev [0-9.]+ +train 5-fold CV [0-9.]+ +target", chosen)) == 3, chosen
