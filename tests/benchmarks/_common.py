"""Shared helpers for the benchmark scripts: timing statistics, resident memory, output."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The scripts run as files (python tests/benchmarks/x.py): make the repository importable.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from tests.benchmarks.benchmark_data import locomo_file  # noqa: E402

# EPIMEM_BENCHMARK_DATA, else ../shared/data, else the shipped examples/conversations.json (benchmark_data.py).
LOCOMO = locomo_file()


def disk_mb(folder: Path) -> float:
    """Bytes the files under ``folder`` take on disk (allocated blocks, as ``du`` counts), in MB."""
    return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file()) / 2**20


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


class PeakRss:
    """Samples resident memory in a thread (every 20 ms) and keeps the peak: of this process, or of ``pid``'s."""

    def __init__(self, interval: float = 0.02, pid: int | None = None) -> None:
        self._process = psutil.Process(pid)
        self.peak = self._rss()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> float:
        return float(self._process.memory_info().rss) / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._rss())
            except psutil.NoSuchProcess:  # the process measured ended: its peak is the last one seen
                return
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._process.is_running():
            self.peak = max(self.peak, self._rss())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[position]


def summary(values_s: list[float]) -> dict[str, float]:
    """Milliseconds: p50, p95, mean."""
    ms = [v * 1000 for v in values_s]
    return {"p50": percentile(ms, 50), "p95": percentile(ms, 95), "mean": statistics.fmean(ms) if ms else float("nan")}


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def interleaved(
    functions: dict[str, Callable[[int], Any]], rounds: int, before: Callable[[int], Any] | None = None
) -> dict[str, list[float]]:
    """Run each function once per round, alternating, so machine noise hits all of them alike. The
    order is reversed every other round: the first to touch a round's data (e.g. a partition not
    loaded yet) is each function of a pair equally often. ``before(round)``, untimed, opens each round
    (e.g. a write to the group, as applications write between two reads)."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    names = list(functions)
    for index in range(rounds):
        if before is not None:
            before(index)
        for name in names if index % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            functions[name](index)
            times[name].append(time.perf_counter() - started)
    return times


def line(label: str, **figures: Any) -> None:
    parts = []
    for key, value in figures.items():
        parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    print(f"{label:<34} " + "  ".join(parts), flush=True)


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)
