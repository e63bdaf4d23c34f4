"""Load: concurrent HTTP clients against real epimem servers on 127.0.0.1, then a full check.

    python tests/benchmarks/load.py                               # 32 clients x 60 s, one server
    python tests/benchmarks/load.py --clients 8 --duration 10     # the short form
    python tests/benchmarks/load.py --servers 2                   # two servers on one Chroma server
    python tests/benchmarks/load.py --url http://127.0.0.1:8000   # an already running server
    python tests/benchmarks/load.py --curve 1,2,4,8,16 --duration 20   # recall only: req/s and latency per client count

The mix: 70% recall (50% search, 20% context), 20% message batches, 10% timeline, over 50
groups. Afterwards every session that got messages is flushed and read back: every acknowledged
message is in the history and in exactly one episode. Prints throughput and p50/p95/p99 per
route; exits non-zero on any 5xx, lost message or duplicated episode membership.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from _common import ROOT

WORDS = (
    "hiking Lake Tahoe dog Rex espresso machine budget review painting class marathon training "
    "guitar lessons adoption agency camping trip birthday party pottery workshop job interview"
).split()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in time")


@dataclass
class Cluster:
    """A Chroma server (when asked) and N epimem servers, all on loopback, all stopped at the end."""

    servers: int
    chroma: bool
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def start(self) -> None:
        env = {
            **os.environ,
            "EPIMEM_DATA_DIR": str(self.workdir / "data"),
            "HF_HUB_OFFLINE": "1",
            "ANONYMIZED_TELEMETRY": "False",
            "TOKENIZERS_PARALLELISM": "false",
        }
        if self.chroma:
            port = free_port()
            chroma = Path(sys.executable).parent / "chroma"
            command = [str(chroma if chroma.exists() else "chroma"), "run", "--path", str(self.workdir / "chroma")]
            self._spawn(command + ["--host", "127.0.0.1", "--port", str(port)], env, "chroma.log")
            wait_http(f"http://127.0.0.1:{port}/api/v2/heartbeat", self.processes[-1])
            env.update(EPIMEM_CHROMA_HOST="127.0.0.1", EPIMEM_CHROMA_PORT=str(port))
        for index in range(self.servers):
            port = free_port()
            command = [sys.executable, "-m", "uvicorn", "--factory", "api.server:serve_app", "--host", "127.0.0.1"]
            command += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
            self._spawn(command, {**env, "EPIMEM_NODE_ID": f"node{index}"}, f"epimem-{index}.log")
            self.urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(self.urls, self.processes[-self.servers :], strict=True):
            wait_http(url + "/readyz", process)

    def _spawn(self, command: list[str], env: dict[str, str], log: str) -> None:
        output = open(self.workdir / log, "ab")  # noqa: SIM115 - lives as long as the process
        self.processes.append(subprocess.Popen(command, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for process in reversed(self.processes):  # epimem servers first, Chroma last
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    acked: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def batch(rng: random.Random, client: int, counter: int, size: int) -> list[dict[str, Any]]:
    start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=counter * size)
    return [
        {
            "id": f"c{client}-m{counter * size + i}",
            "content": f"We talked about {' '.join(rng.sample(WORDS, 3))} ({client}/{counter}/{i}).",
            "producer_id": rng.choice(["ana", "ben", "caro"]),
            "timestamp": (start + timedelta(minutes=i)).isoformat(),
        }
        for i in range(size)
    ]


async def client_loop(
    index: int,
    urls: list[str],
    groups: list[str],
    deadline: float,
    stats: Stats,
    rng: random.Random,
    *,
    recall_only: bool = False,
) -> None:
    sent = 0
    async with httpx.AsyncClient(timeout=60) as http:
        while time.monotonic() < deadline:
            base = urls[rng.randrange(len(urls))]  # spread over the servers
            group = rng.choice(groups)
            roll = rng.random() * (0.7 if recall_only else 1.0)  # recall only: 5/7 search, 2/7 context
            if roll < 0.5:
                route, method, path = "search", "POST", f"/v1/groups/{group}/search"
                body: Any = {"query": " ".join(rng.sample(WORDS, 2)), "k": 5}
            elif roll < 0.7:
                route, method, path = "context", "POST", f"/v1/groups/{group}/context"
                body = {"query": " ".join(rng.sample(WORDS, 2)), "token_budget": 300}
            elif roll < 0.9:
                session = f"load-{index}"
                route, method, path = "messages", "POST", f"/v1/groups/{group}/sessions/{session}/messages"
                body = {"messages": batch(rng, index, sent, 5)}
                sent += 1
            else:
                route, method, path, body = "timeline", "GET", f"/v1/groups/{group}/timeline?limit=20", None
            started = time.perf_counter()
            try:
                response = await http.request(method, base + path, json=body)
            except httpx.TransportError as error:
                stats.transport_errors[type(error).__name__] += 1
                continue
            stats.latencies[route].append(time.perf_counter() - started)
            stats.statuses[(route, response.status_code)] += 1
            if route == "messages" and response.is_success:
                stats.acked[(group, f"load-{index}")].update(m["id"] for m in body["messages"])


def seed(urls: list[str], groups: list[str]) -> None:
    """Every group gets a few episodes, so recall has something to find."""
    rng = random.Random(0)
    with httpx.Client(timeout=120) as http:
        for number, group in enumerate(groups):
            base = urls[number % len(urls)]
            messages = batch(rng, -1, number, 8)
            http.post(
                f"{base}/v1/groups/{group}/sessions/seed/messages", json={"messages": messages}
            ).raise_for_status()
            http.post(f"{base}/v1/groups/{group}/sessions/seed/flush").raise_for_status()


def verify(urls: list[str], stats: Stats) -> dict[str, int]:
    """Flush every written session, then read it back through the API."""
    lost = duplicated = orphaned = checked = 0
    with httpx.Client(timeout=300) as http:
        for number, ((group, session), acked) in enumerate(sorted(stats.acked.items())):
            base = urls[number % len(urls)]
            http.post(f"{base}/v1/groups/{group}/sessions/{session}/flush").raise_for_status()
            history: set[str] = set()
            after: str | None = None
            while True:
                page = http.get(
                    f"{base}/v1/groups/{group}/sessions/{session}/messages",
                    params={"limit": 500, **({"cursor": after} if after else {})},
                )
                assert page.is_success, page.text
                history |= {m["id"] for m in page.json()["messages"]}
                if (after := page.json()["next_cursor"]) is None:
                    break
            members: Counter[str] = Counter()
            cursor = None
            while True:
                params: dict[str, Any] = {"session_id": session, "limit": 200}
                if cursor:
                    params["cursor"] = cursor
                page = http.get(f"{base}/v1/groups/{group}/timeline", params=params)
                assert page.is_success, page.text
                for episode in page.json()["episodes"]:
                    members.update(episode["source_message_ids"])
                cursor = page.json()["next_cursor"]
                if not cursor:
                    break
            lost += len(acked - history) + len(acked - set(members))
            duplicated += sum(1 for count in members.values() if count > 1)
            orphaned += len(set(members) - history)
            checked += len(acked)
    return {"checked": checked, "lost": lost, "duplicated": duplicated, "orphaned": orphaned}


async def run_clients(
    urls: list[str], groups: list[str], clients: int, duration: float, stats: Stats, *, recall_only: bool = False
) -> float:
    deadline = time.monotonic() + duration
    started = time.perf_counter()
    await asyncio.gather(
        *(
            client_loop(i, urls, groups, deadline, stats, random.Random(i), recall_only=recall_only)
            for i in range(clients)
        )
    )
    return time.perf_counter() - started


def curve(urls: list[str], groups: list[str], counts: list[int], duration: float) -> dict[int, dict[str, Any]]:
    """Recall only (search and context), for each number of concurrent clients in turn."""
    found: dict[int, dict[str, Any]] = {}
    print(f"curve: recall only (5/7 search, 2/7 context), {duration:.0f} s per step, {len(groups)} groups")
    print(f"{'clients':>8}{'req/s':>9}{'search p50':>12}{'p95':>8}{'context p50':>13}{'p95':>8}{'errors':>8}")
    for count in counts:
        stats = Stats()
        asyncio.run(run_clients(urls, groups, 1, 2.0, Stats(), recall_only=True))  # warm-up
        elapsed = asyncio.run(run_clients(urls, groups, count, duration, stats, recall_only=True))
        total = sum(len(v) for v in stats.latencies.values())
        errors = sum(n for (_, status), n in stats.statuses.items() if status >= 400) + sum(
            stats.transport_errors.values()
        )
        row = {"throughput": total / elapsed, "errors": errors}
        for route in ("search", "context"):
            values = stats.latencies.get(route, [])
            row[route] = {"p50_ms": percentile(values, 50) * 1000, "p95_ms": percentile(values, 95) * 1000}
        found[count] = row
        print(
            f"{count:>8}{row['throughput']:>9.1f}{row['search']['p50_ms']:>12.0f}{row['search']['p95_ms']:>8.0f}"
            f"{row['context']['p50_ms']:>13.0f}{row['context']['p95_ms']:>8.0f}{errors:>8}"
        )
    if 1 in found and 8 in found:
        print(f"throughput 8 clients / 1 client: {found[8]['throughput'] / found[1]['throughput']:.2f} (target 1.6)")
    return found


def report(stats: Stats, elapsed: float, checks: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    total = sum(len(v) for v in stats.latencies.values())
    fivexx = sum(count for (_, status), count in stats.statuses.items() if status >= 500)
    other = sum(count for (_, status), count in stats.statuses.items() if 400 <= status < 500)
    print(f"load: {args.clients} clients x {args.duration:.0f} s, {args.groups} groups, {len(args.urls)} server(s)")
    print(f"{'route':<10}{'requests':>10}{'req/s':>10}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}")
    for route in ("search", "context", "messages", "timeline"):
        values = stats.latencies.get(route, [])
        print(
            f"{route:<10}{len(values):>10}{len(values) / elapsed:>10.1f}"
            f"{percentile(values, 50) * 1000:>10.0f}{percentile(values, 95) * 1000:>10.0f}"
            f"{percentile(values, 99) * 1000:>10.0f}"
        )
    print(f"throughput (req/s): {total / elapsed:.1f}   total requests: {total}")
    print(f"5xx: {fivexx}   4xx: {other}   transport errors: {sum(stats.transport_errors.values())}")
    if fivexx or other or stats.transport_errors:
        print(
            "errors:", {f"{r} {c}": n for (r, c), n in stats.statuses.items() if c >= 400}, dict(stats.transport_errors)
        )
    print(
        f"acknowledged messages checked: {checks['checked']}   lost: {checks['lost']}   "
        f"in two episodes: {checks['duplicated']}   episode sources not in history: {checks['orphaned']}"
    )
    return {
        "throughput": total / elapsed,
        "requests": total,
        "5xx": fivexx,
        "4xx": other,
        "transport_errors": dict(stats.transport_errors),
        "routes": {
            route: {
                "requests": len(values),
                "p50_ms": percentile(values, 50) * 1000,
                "p95_ms": percentile(values, 95) * 1000,
                "p99_ms": percentile(values, 99) * 1000,
            }
            for route, values in stats.latencies.items()
        },
        **checks,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--servers", type=int, default=1, help="epimem servers to start (>1 shares a Chroma server)")
    parser.add_argument("--chroma-server", action="store_true", help="use a Chroma server even with one epimem")
    parser.add_argument("--url", dest="urls", action="append", default=[], help="use running servers instead")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--curve", help="recall only, for these client counts in turn (e.g. 1,2,4,8,16)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="epimem-load-"))
    figures: dict[str, Any] | None = None
    cluster = Cluster(servers=args.servers, chroma=args.chroma_server or args.servers > 1, workdir=workdir)
    try:
        if not args.urls:
            cluster.start()
            args.urls = cluster.urls
        groups = [f"load-{uuid_suffix()}-{i}" for i in range(args.groups)]
        seed(args.urls, groups)
        if args.curve:
            figures = {"curve": curve(args.urls, groups, [int(n) for n in args.curve.split(",")], args.duration)}
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
            return 0
        stats = Stats()
        elapsed = asyncio.run(run_clients(args.urls, groups, args.clients, args.duration, stats))
        checks = verify(args.urls, stats)
        figures = report(stats, elapsed, checks, args)
    finally:
        cluster.stop()
        failed = figures is None or bool(figures.get("5xx")) or bool(figures.get("transport_errors"))
        if failed:
            print_tracebacks(workdir)
        if failed or os.environ.get("EPIMEM_LOAD_KEEP"):
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    healthy = figures["5xx"] == 0 and not figures["transport_errors"]
    correct = figures["lost"] == 0 and figures["duplicated"] == 0 and figures["orphaned"] == 0
    print("OK" if healthy and correct else "FAILED")
    return 0 if healthy and correct else 1


def print_tracebacks(workdir: Path) -> None:
    """The servers' tracebacks (a 5xx is logged with one), so that a failed run says why."""
    for log in sorted(workdir.glob("epimem-*.log")):
        lines = log.read_text(errors="replace").splitlines()
        starts = [number for number, line in enumerate(lines) if line.startswith("Traceback")]
        for start in starts[-3:]:
            print(f"--- {log.name}, line {start + 1}")
            print("\n".join(lines[max(0, start - 2) : start + 40]))


def uuid_suffix() -> str:
    return os.urandom(4).hex()


if __name__ == "__main__":
    sys.exit(main())
