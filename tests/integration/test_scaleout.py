"""Scale-out: two epimem servers on one Chroma server, the load test spread across both.

Runs tests/benchmarks/load.py in its short form; the script starts `chroma run` and two
`uvicorn api.server:serve_app` processes on 127.0.0.1, sends the mix to both at random, then
flushes and checks every acknowledged message through the API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import BENCHMARKS

LOAD = BENCHMARKS / "load.py"


@pytest.mark.slow
def test_two_servers_share_one_chroma_under_load(tmp_path: Path) -> None:
    figures_file = tmp_path / "load.json"
    clients, duration = os.environ.get("EPIMEM_LOAD_CLIENTS", "8"), os.environ.get("EPIMEM_LOAD_SECONDS", "6")
    command = [sys.executable, str(LOAD), "--servers", "2", "--clients", clients, "--duration", duration]
    command += ["--groups", "10", "--json", str(figures_file)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=540)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(figures_file.read_text())
    assert figures["5xx"] == 0 and figures["lost"] == 0 and figures["duplicated"] == 0
    assert figures["checked"] > 0, "no message batch was acknowledged"
    assert {"search", "messages"} <= set(figures["routes"])
    print(result.stdout)
