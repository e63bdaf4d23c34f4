"""One epimem server's memory against its read cache's bounds (``EPIMEM_READ_CACHE_MB``, ``EPIMEM_READ_CACHE_GROUPS``).

Build (in this process, once): ``--groups`` groups of ``--messages`` messages, in sessions of
``--session-messages``, LoCoMo turns (benchmark_data.py's file; each group from another place in it; generated
sentences if it holds none) through the bulk ingest path imports use (big_group.py ``--bulk``: a group's sessions
stored while they are embedded, each distinct text embedded once, then formed in one batch). With ``--data-dir``
the build is kept and reused: the sessions already there are skipped.

Measure: for each ``--configs`` entry MB/GROUPS, a fresh real ``epimem serve`` process on the folder with
``EPIMEM_READ_CACHE_MB`` and ``EPIMEM_READ_CACHE_GROUPS`` in its environment (the snapshots an earlier server kept
at its close removed first: every group is read from Chroma). Over HTTP, every group in turn, ``--passes`` times:
a ``/search`` (k 10) and a ``/context`` (1,000 tokens), each with a question not asked before; after each group the
server process's resident memory (psutil, its pid) and what its read cache holds (its ``/metrics``:
``epimem_read_cache_bytes``, ``_groups``, ``_evictions_total``). Printed per configuration: the memory after the
start (model loaded) and every ``--every`` groups, then the configurations side by side: the peak, the cache's
bytes and groups, MB per group snapshot, the memory's growth per group read while the cache fills (a least-squares
slope) and its plateau once the cache holds what it will (median and range of every read after).

    python tests/benchmarks/server_memory.py                        # 24 groups x 1,000 messages; 256/32 and 32/4
    python tests/benchmarks/server_memory.py --quick                # 6 groups x 100 messages
    python tests/benchmarks/server_memory.py --data-dir /tmp/smem   # the build kept: a second run measures only
    python tests/benchmarks/server_memory.py --data-dir /tmp/smem --configs 256/32,64/8,32/4
    python tests/benchmarks/server_memory.py --server --data-dir /tmp/smem-server   # the data in a `chroma run`

With ``--server`` the data live in a real ``chroma run`` on ``<data dir>/chroma-server``, started by the script,
and the epimem servers talk to it: the epimem server's memory is then its own (model, read cache, buffers), the
Chroma server's is printed beside it. Embedded (the default), the epimem server's memory includes Chroma's: the
group indexes it loads, released every ``EPIMEM_CHROMA_RECYCLE_AFTER`` collections.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import httpx
import numpy as np
import psutil
from big_group import questions, remembering_embedder, session_messages, turns
from prometheus_client.parser import text_string_to_metric_families

from memory.readmodel.files import FOLDER

sys.path.insert(0, str(c.ROOT / "tests"))
from helpers.processes import clean_env  # noqa: E402
from helpers.servers import ChromaServer, ServerProcess  # noqa: E402

WORDS = "garden concert hiking recipe museum guitar marathon pottery library festival bakery puppy river".split()
CACHE = ("bytes", "groups", "evictions")


def group_name(number: int) -> str:
    return f"mem-{number:03d}"


def generated(count: int) -> list[tuple[str, str]]:
    """Sentences when the conversation file holds no turns."""
    return [(f"speaker{i % 2}", f"We talked about the {WORDS[i % len(WORDS)]} on day {i}.") for i in range(count)]


def build(folder: Path, groups: int, messages: int, per_session: int, chroma: dict[str, Any]) -> None:
    """Fill the groups through the bulk path (memory.service.ingest_sessions), one call per group."""
    from api.facade import Epimem
    from memory.models import Message

    said = turns() or generated(2_000)
    sessions = -(-messages // per_session)
    service = Epimem.from_settings(data_dir=folder, background=False, embedder=remembering_embedder(), **chroma)
    try:
        began, added = time.perf_counter(), 0
        for number in range(groups):
            group = group_name(number)
            known = {info.session_id for info in service.list_sessions(group)} if service.group_exists(group) else set()
            known = {session for session in known if not service.pending_messages(group, session)}
            chunk = {}
            for session in range(sessions):
                if f"s{session:04d}" in known:
                    continue
                size = min(per_session, messages - session * per_session)
                # A different place in the turns for every group and session (big_group.session_messages).
                rows = session_messages(said, number * sessions + session, per_session)[:size]
                chunk[f"s{session:04d}"] = [Message(**row) for row in rows]
            if chunk:
                service.memory.ingest_sessions(group, chunk)
                added += sum(len(rows) for rows in chunk.values())
                rate = added / (time.perf_counter() - began)
                print(f"{group}: {service.vector_count(group)} vectors, {rate:.1f} messages/s", flush=True)
    finally:
        service.close()


@dataclass
class Row:
    """What one server held after a group was read."""

    pass_number: int
    groups_read: int
    rss_mb: float
    cache: dict[str, float]
    chroma_mb: float | None = None


@dataclass
class Run:
    mb: int
    groups: int
    start_mb: float = 0.0
    chroma_start_mb: float | None = None
    peak_mb: float = 0.0
    rows: list[Row] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.mb} MB / {self.groups} groups"


def tree_rss_mb(process: psutil.Process) -> float:
    """The process's resident memory with its children's (``epimem serve`` serves in its own process)."""
    members = [process, *process.children(recursive=True)]
    return sum(float(member.memory_info().rss) for member in members) / 2**20


def read_cache(http: httpx.Client) -> dict[str, float]:
    """The server's read cache figures, from its /metrics."""
    found: dict[str, float] = {}
    response = http.get("/metrics")
    response.raise_for_status()
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            for name in CACHE:
                if sample.name in (f"epimem_read_cache_{name}", f"epimem_read_cache_{name}_total"):
                    found[name] = float(sample.value)
    missing = [name for name in CACHE if name not in found]
    if missing:
        raise RuntimeError(f"the server's /metrics has no read cache figures ({missing}): an older epimem?")
    return found


def measure(
    folder: Path,
    run: Run,
    groups: list[str],
    asked: list[str],
    *,
    passes: int,
    every: int,
    chroma: ChromaServer | None,
) -> None:
    """A fresh ``epimem serve`` with the run's bounds reads every group ``passes`` times."""
    shutil.rmtree(folder / FOLDER, ignore_errors=True)  # no snapshot kept by an earlier server's close
    settings = {
        "EPIMEM_DATA_DIR": str(folder),
        "EPIMEM_READ_CACHE_MB": str(run.mb),
        "EPIMEM_READ_CACHE_GROUPS": str(run.groups),
    }
    if chroma is not None:
        settings |= {"EPIMEM_CHROMA_HOST": "127.0.0.1", "EPIMEM_CHROMA_PORT": str(chroma.port)}
        settings["EPIMEM_CHROMA_TIMEOUT_S"] = "300"  # the machine is shared and loaded
    log = folder / f"serve-{run.mb}-{run.groups}.log"
    server = ServerProcess.serve("--log-level", "warning", env=clean_env(**settings), log=log)
    chroma_process = psutil.Process(chroma.process.pid) if chroma is not None and chroma.process else None
    c.heading(f"{run.name}: a fresh epimem server, {len(groups)} groups read {passes} times")
    with server, httpx.Client(base_url=server.url, timeout=600) as http:
        assert server.process is not None
        process = psutil.Process(server.process.pid)
        run.start_mb = tree_rss_mb(process)
        if chroma_process is not None:
            run.chroma_start_mb = tree_rss_mb(chroma_process)
            c.line("after the start (model loaded) MB", rss=run.start_mb, chroma_rss=run.chroma_start_mb)
        else:
            c.line("after the start (model loaded) MB", rss=run.start_mb)
        questions_left = iter(asked)
        with c.PeakRss(pid=process.pid) as peak:
            for pass_number in range(1, passes + 1):
                for index, group in enumerate(groups, start=1):
                    body = {"query": next(questions_left), "k": 10}
                    http.post(f"/v1/groups/{group}/search", json=body).raise_for_status()
                    body = {"query": next(questions_left), "token_budget": 1000}
                    http.post(f"/v1/groups/{group}/context", json=body).raise_for_status()
                    chroma_mb = tree_rss_mb(chroma_process) if chroma_process is not None else None
                    row = Row(pass_number, index, tree_rss_mb(process), read_cache(http), chroma_mb)
                    run.rows.append(row)
                    if index % every == 0 or index in (1, len(groups)):
                        figures = {"rss": row.rss_mb, "cache_mb": row.cache["bytes"] / 2**20}
                        figures |= {"cache_groups": int(row.cache["groups"]), "evicted": int(row.cache["evictions"])}
                        if chroma_mb is not None:
                            figures["chroma_rss"] = chroma_mb
                        c.line(f"pass {pass_number}, after {index} group{'s' if index > 1 else ''} MB", **figures)
        run.peak_mb = max(peak.peak, *(row.rss_mb for row in run.rows))


def filled_at(run: Run) -> int:
    """Groups read (first pass) when the cache stopped growing in groups: its first eviction, else the end."""
    first = [row for row in run.rows if row.pass_number == 1]
    for row in first:
        if row.cache["evictions"] > 0:
            return row.groups_read - 1
    return len(first)


def side_by_side(runs: list[Run], every: int) -> None:
    """The configurations in columns: where the memory grows, where it stops."""
    labels: list[tuple[str, list[str]]] = []

    def add(label: str, values: list[str]) -> None:
        labels.append((label, values))

    def mb(value: float) -> str:
        return f"{value:,.0f}"

    add("after the start (model loaded)", [mb(run.start_mb) for run in runs])
    first = [[row for row in run.rows if row.pass_number == 1] for run in runs]
    count = len(first[0])
    for read in sorted({1, count, *range(every, count + 1, every)}):
        add(f"after {read} group{'s' if read > 1 else ''}", [mb(rows[read - 1].rss_mb) for rows in first])
    passes = max(row.pass_number for row in runs[0].rows)
    for pass_number in range(2, passes + 1):
        add(
            f"after pass {pass_number}",
            [mb(next(r for r in reversed(run.rows) if r.pass_number == pass_number).rss_mb) for run in runs],
        )
    add("peak", [mb(run.peak_mb) for run in runs])
    add(
        "cache held at the end: MB / groups",
        [f"{run.rows[-1].cache['bytes'] / 2**20:,.1f} / {run.rows[-1].cache['groups']:.0f}" for run in runs],
    )
    add("groups evicted", [f"{run.rows[-1].cache['evictions']:.0f}" for run in runs])
    per_group, growth, plateau = [], [], []
    for run, rows in zip(runs, first, strict=True):
        full = filled_at(run)
        held = rows[full - 1].cache
        per_group.append(f"{held['bytes'] / 2**20 / max(held['groups'], 1):.2f}")
        # A least-squares slope: embedded Chroma's loaded indexes come and go (a saw, not a line).
        filling = rows[:full]
        slope = np.polyfit([r.groups_read for r in filling], [r.rss_mb for r in filling], 1)[0] if full > 1 else 0
        growth.append(f"{slope:.1f} (groups 1-{full})")
        after = sorted(row.rss_mb for row in run.rows[full:])  # every read once the cache holds what it will
        if after:
            plateau.append(f"{statistics.median(after):,.0f} ({after[0]:,.0f}-{after[-1]:,.0f})")
        else:
            plateau.append("-")
    add("MB per group snapshot (the cache's own)", per_group)
    add("RSS MB per group read while the cache fills", growth)
    add("plateau: RSS once it is full, median (range)", plateau)
    if runs[0].chroma_start_mb is not None:
        add(
            "the Chroma server: at the start / the end",
            [f"{mb(run.chroma_start_mb or 0.0)} / {mb(run.rows[-1].chroma_mb or 0.0)}" for run in runs],
        )
    c.heading("side by side: the epimem server's resident memory (MB)")
    print(f"{'':<42}" + "".join(f"{run.name:>24}" for run in runs))
    for label, values in labels:
        print(f"{label:<42}" + "".join(f"{value:>24}" for value in values), flush=True)


def parse_configs(text: str) -> list[tuple[int, int]]:
    configs = []
    for entry in text.split(","):
        mb, _, groups = entry.partition("/")
        configs.append((int(mb), int(groups)))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="6 groups x 100 messages, every 2")
    parser.add_argument("--groups", type=int, default=24)
    parser.add_argument("--messages", type=int, default=1000, help="messages per group")
    parser.add_argument("--session-messages", type=int, default=100, help="messages per session")
    parser.add_argument("--configs", default="256/32,32/4", help="read cache bounds MB/GROUPS, comma separated")
    parser.add_argument("--passes", type=int, default=2, help="times every group is read")
    parser.add_argument("--every", type=int, default=4, help="print the memory every N groups")
    parser.add_argument("--data-dir", type=Path, help="keep the build here and reuse it (default: a temporary one)")
    parser.add_argument("--server", action="store_true", help="the data in a real `chroma run` on the data folder")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.messages, args.session_messages, args.every = 6, 100, 50, 2
    with tempfile.TemporaryDirectory(prefix="epimem-server-memory-") as scratch:
        folder = args.data_dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        chroma = ChromaServer(folder / "chroma-server") if args.server else None
        try:
            settings: dict[str, Any] = {}
            if chroma is not None:
                chroma.path.mkdir(parents=True, exist_ok=True)
                chroma.start()
                settings = {"chroma_host": "127.0.0.1", "chroma_port": chroma.port, "chroma_timeout_s": 300}
            c.heading(f"build: {args.groups} groups x {args.messages} messages, {c.LOCOMO.name}")
            started = time.perf_counter()
            build(folder, args.groups, args.messages, args.session_messages, settings)
            c.line("build (s)", seconds=time.perf_counter() - started, data_mb=c.disk_mb(folder))
            groups = [group_name(number) for number in range(args.groups)]
            needed = 2 * len(groups) * args.passes  # a new question for every request, while there are enough
            asked = questions() or [f"What did we say about the {word}?" for word in WORDS]
            asked = (asked * -(-needed // len(asked)))[:needed]
            runs = [Run(mb, most) for mb, most in parse_configs(args.configs)]
            for run in runs:
                measure(folder, run, groups, asked, passes=args.passes, every=args.every, chroma=chroma)
            side_by_side(runs, args.every)
        finally:
            if chroma is not None:
                chroma.stop()


if __name__ == "__main__":
    main()
