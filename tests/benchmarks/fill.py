"""One group filled as an application fills it, over HTTP, then the server restarted: the ingest rate through the
fill, and the searches that follow the restart against their floor.

A real ``epimem serve`` on a fresh folder (embedded Chroma, the bundled model); LoCoMo turns, cycled, in
``--sessions`` sessions of ``--messages`` messages, ``--per-add`` messages a call; with ``--flush`` a flush after
each session (what an import or a batch job does), without it sessions close when they go quiet
(``EPIMEM_EPISODE_IDLE_SECONDS``, ``--idle``), as chat applications leave them. Then:

- the rate (messages/s) of each tenth of the fill, and the last tenth's against the first's;
- the server stopped and started again: seconds until it is ready, the first search, then ``--questions`` searches
  (distinct LoCoMo questions, k 10), one after another, as users meet a server that just started, then as many
  other questions again (what the same server answers once the restart is behind it: the search's own cost);
- the floor of each of those questions (the query embedding plus one raw Chroma query of 10 on the group's index,
  ``context.Floor``), measured in this process after the server stopped.

    python tests/benchmarks/fill.py                                   # 60,000 messages: 600 sessions of 100, flushed
    python tests/benchmarks/fill.py --per-add 4 --sessions 100        # chat-paced: 4 a call, sessions close when quiet
    python tests/benchmarks/fill.py --quick                           # 5 sessions of 20 (the short form)
    python tests/benchmarks/fill.py --data-dir /tmp/fill --no-fill    # measure the restart of a folder filled before

Targets: the last tenth's rate >= 0.9 of the first's; the searches after the restart p95 <= 3x their floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as c
import httpx
from big_group import questions, session_messages, turns
from context import Floor

sys.path.insert(0, str(c.ROOT / "tests"))
from helpers.servers import ServerProcess  # noqa: E402

GROUP = "fill"


def serve(folder: Path, idle: float, log: Path) -> ServerProcess:
    env = {**os.environ, "EPIMEM_DATA_DIR": str(folder), "EPIMEM_EPISODE_IDLE_SECONDS": str(idle)}
    return ServerProcess.serve("--log-level", "warning", env=env, log=log).start(timeout=600)


def fill(
    server: ServerProcess, sessions: int, per_session: int, per_add: int, flush: bool, first: int = 0
) -> list[float]:
    """Add sessions ``first`` .. ``first + sessions - 1``; the rate (messages/s) of each tenth of the messages."""
    said = turns()
    base = f"{server.url}/v1/groups/{GROUP}/sessions"
    total = sessions * per_session
    marks = [round(total * tenth / 10) for tenth in range(1, 11)]
    rates: list[float] = []
    added, previous, began = 0, 0, time.perf_counter()
    with httpx.Client(timeout=600) as client:
        for number in range(first, first + sessions):
            batch = session_messages(said, number, per_session)
            for message in batch:
                message["timestamp"] = message["timestamp"].isoformat()
            for offset in range(0, len(batch), per_add):
                part = batch[offset : offset + per_add]
                answer = client.post(f"{base}/s{number:04d}/messages", json={"messages": part})
                assert answer.status_code == 200, answer.text
                added += len(part)
                if not flush:
                    previous, began = _tenths(added, marks, rates, previous, began)
            if flush:  # a session's flush belongs to its tenth
                assert client.post(f"{base}/s{number:04d}/flush").status_code == 200
                previous, began = _tenths(added, marks, rates, previous, began)
            if (number + 1 - first) % max(1, sessions // 20) == 0:
                print(f"  {number + 1 - first} sessions, {added} messages", flush=True)
    return rates


def _tenths(added: int, marks: list[int], rates: list[float], previous: int, began: float) -> tuple[int, float]:
    """Close each tenth that ``added`` messages complete: its rate appended; the new tenth's start returned."""
    while marks and added >= marks[0]:
        done = time.perf_counter()
        rates.append((marks[0] - previous) / (done - began))
        began, previous = done, marks.pop(0)
    return previous, began


def after_restart(server: ServerProcess, asked: list[str]) -> tuple[float, list[float]]:
    """Seconds of the first search, and of each of the others (one after another)."""
    seconds = []
    with httpx.Client(timeout=600) as client:
        for question in asked:
            started = time.perf_counter()
            answer = client.post(f"{server.url}/v1/groups/{GROUP}/search", json={"query": question, "k": 10})
            seconds.append(time.perf_counter() - started)
            assert answer.status_code == 200, answer.text
    return seconds[0], seconds[1:]


def floors(folder: Path, asked: list[str]) -> list[float]:
    from api.facade import Epimem

    service = Epimem.from_settings(data_dir=folder, background=False)
    try:
        floor = Floor(service)
        floor(GROUP, "a first query loads the index")
        return [c.timed(lambda q=question: floor(GROUP, q))[0] for question in asked]
    finally:
        service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=600)
    parser.add_argument("--messages", type=int, default=100, help="messages per session")
    parser.add_argument("--per-add", type=int, default=100, help="messages per add call")
    parser.add_argument("--no-flush", dest="flush", action="store_false", help="no flush: sessions close when quiet")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds a session stays open after its last message")
    parser.add_argument("--questions", type=int, default=40, help="searches after the restart (after the first)")
    parser.add_argument("--data-dir", type=Path, help="keep the filled folder here")
    parser.add_argument("--no-fill", dest="do_fill", action="store_false", help="measure the restart of --data-dir")
    parser.add_argument("--first-session", type=int, default=0, help="number of the first session (go on with a fill)")
    parser.add_argument("--quick", action="store_true", help="5 sessions of 20, 5 searches")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.messages, args.per_add, args.questions = 5, 20, 10, 5
    known = questions()
    asked = known[: args.questions + 1]
    other = known[args.questions + 1 : 2 * args.questions + 2]  # a second pass, none of them cached
    with tempfile.TemporaryDirectory(prefix="epimem-fill-") as scratch:
        folder = args.data_dir or Path(scratch) / "data"
        log = Path(scratch) / "server.log"
        c.heading(f"fill: {args.sessions} sessions x {args.messages} messages, {args.per_add} per add")
        if args.do_fill:
            server = serve(folder, args.idle, log)
            try:
                rates = fill(server, args.sessions, args.messages, args.per_add, args.flush, args.first_session)
            finally:
                server.stop(timeout=600)
            c.line("rate per tenth (msg/s)", **{f"t{i + 1}": rate for i, rate in enumerate(rates)})
            c.line("ratio last / first tenth (target >= 0.9)", ratio=rates[-1] / rates[0])
        c.heading("restart")
        started = time.perf_counter()
        server = serve(folder, args.idle, log)
        ready = time.perf_counter() - started
        try:
            first, warm = after_restart(server, asked)
            later = after_restart(server, other)[1]
        finally:
            server.stop(timeout=600)
        floor = floors(folder, asked[1:] + other[1:])
        c.line("ready after a restart (s)", seconds=ready)
        c.line("first search after a restart (s)", seconds=first)
        report("searches after it", warm, floor[: len(warm)])
        report("the next ones (other questions)", later, floor[len(warm) :])


def report(label: str, seconds: list[float], floor: list[float]) -> None:
    c.line(f"{label} (ms)", p50=1000 * statistics.median(seconds), p95=1000 * c.percentile(seconds, 95))
    c.line("  their floor (ms)", p50=1000 * statistics.median(floor), p95=1000 * c.percentile(floor, 95))
    c.line(
        "  ratio to the floor (target p95 <= 3)",
        p50=statistics.median(seconds) / statistics.median(floor),
        p95=c.percentile(seconds, 95) / c.percentile(floor, 95),
    )


if __name__ == "__main__":
    main()
