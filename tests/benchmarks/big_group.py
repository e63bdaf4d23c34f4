"""One big group, written between reads: group-wide /search and /context vs their floor, and the first
search after a start (issue 31 points 2 and 3).

Build (resumable: sessions already there are skipped; stop it any time and measure what is there):
``--build`` fills one group with LoCoMo turns (speaker and text, cycled), ``--sessions`` sessions of
``--messages`` messages, 500 per add and a flush per session, through the facade; with ``--bulk N``
through the bulk path imports use instead (N sessions per ``ingest_sessions``, each distinct text
embedded once): the same messages and episodes, written several times faster.

Measure (the default): a service started on the folder, then

- first search after a start, twice: the group read from Chroma (no snapshot kept: a first start, or one
  after a crash), then after a restart with the snapshot the first start kept at its close
  (memory.readmodel.files); the model is loaded before, as a server does before it is ready;
  ``two_step``: the first search read the columns alone (a big group: memory.readmodel.build),
  ``read_whole``: seconds until its vectors and messages, read in the background, were in memory;
- idle and written: for LoCoMo questions (``--questions`` new ones per block, so the query-embedding
  cache never answers one), alternating, ``search`` (k 10) and ``context`` (1,000 tokens)
  through the facade, and the floor (the query embedding, encoded, plus one raw Chroma query of 10 over
  the group's index); "written": a one-message add to a session of the group before every round.

    python tests/benchmarks/big_group.py --build --bulk 20 --data-dir /tmp/big --sessions 600 --messages 100
    python tests/benchmarks/big_group.py --data-dir /tmp/big --questions 40
    python tests/benchmarks/big_group.py --data-dir /tmp/p200k --group bench-group   # partitions.py's group
    python tests/benchmarks/big_group.py --quick      # 4 sessions x 50 messages in a temporary folder (vectors tier)
    python tests/benchmarks/big_group.py --data-dir /tmp/big --tier columns   # as before the vectors tier
    python tests/benchmarks/big_group.py --server --build --bulk 20 --data-dir /tmp/big-server   # a `chroma run`
    python tests/benchmarks/big_group.py --server --data-dir /tmp/big-server --questions 40

With ``--server`` the data live in a real ``chroma run`` on ``<data dir>/chroma-server``, started by the
script; a server keeps no snapshot file, so the two first searches are: after a start of both (Chroma
cold: its indexes not loaded), then after a start of the service alone (the Chroma server kept running,
as a deployment restarts its epimem servers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as c

from memory.readmodel.files import FOLDER
from memory.store.codec import index_name
from memory.store.connection import close_embedded

sys.path.insert(0, str(c.ROOT / "tests"))
from helpers.servers import ChromaServer  # noqa: E402

GROUP = "big"


def turns() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for sample in json.loads(c.LOCOMO.read_text()):
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                found += [(str(t.get("speaker", "")), str(t.get("text", ""))) for t in value]
    return found


def questions() -> list[str]:
    return [str(q["question"]) for sample in json.loads(c.LOCOMO.read_text()) for q in sample["qa"]][:400]


def session_messages(said: list[tuple[str, str]], number: int, per_session: int) -> list[dict[str, Any]]:
    start = datetime(2023, 1, 1, tzinfo=UTC)
    batch = []
    for i in range(per_session):
        speaker, text = said[(number * per_session + i) % len(said)]
        moment = start + timedelta(hours=number * 6, minutes=i)
        batch.append({"id": f"m{i}", "role": "user", "content": text, "producer_id": speaker, "timestamp": moment})
    return batch


def remembering_embedder() -> Any:
    """The bundled model, each distinct text encoded once (the fill repeats LoCoMo's 2,760 turns): the
    vectors stored are the model's for those texts; only the fill gets faster."""
    import numpy as np

    from memory.embedding.embedder import SentenceTransformerEmbedder

    class Remembering(SentenceTransformerEmbedder):
        def __init__(self) -> None:
            self._seen: dict[str, Any] = {}  # before the model's start, which encodes a text already
            super().__init__()

        def embed_batch(self, texts: Any) -> Any:
            missing = list(dict.fromkeys(text for text in texts if text not in self._seen))
            if missing:
                self._seen.update(zip(missing, super().embed_batch(missing), strict=True))
            if not texts:
                return np.zeros((0, self.dimension), dtype=np.float32)
            return np.stack([self._seen[text] for text in texts])

    return Remembering()


def build(service: Any, sessions: int, per_session: int, bulk: int) -> None:
    """Fill the group: with ``bulk`` 0 through adds (500 per add) and a flush per session, as an application
    would; with ``bulk`` N through the bulk path imports use (``ingest_sessions``: N sessions stored while
    they are embedded, then formed in one batch), which writes the same messages and episodes faster."""
    from memory.models import Message

    said = turns()
    known = {info.session_id for info in service.list_sessions(GROUP)} if service.group_exists(GROUP) else set()
    known = {session for session in known if not service.pending_messages(GROUP, session)}  # an interrupted fill
    todo = [number for number in range(sessions) if f"s{number:04d}" not in known]
    began, added = time.perf_counter(), 0
    step = max(bulk, 1)
    for at in range(0, len(todo), step):
        numbers = todo[at : at + step]
        if bulk:
            chunk = {f"s{n:04d}": [Message(**m) for m in session_messages(said, n, per_session)] for n in numbers}
            service.memory.ingest_sessions(GROUP, chunk)
        else:
            session = f"s{numbers[0]:04d}"
            batch = session_messages(said, numbers[0], per_session)
            for offset in range(0, len(batch), 500):
                service.add_messages(GROUP, session, batch[offset : offset + 500])
            service.flush(GROUP, session)
        added += per_session * len(numbers)
        if bulk or numbers[0] % 20 == 0:
            rate = added / (time.perf_counter() - began)
            print(f"s{numbers[-1]:04d}: {service.vector_count(GROUP)} vectors, {rate:.1f} messages/s", flush=True)


def tiered(service: Any, tier: str) -> None:
    """Bounds that put the group in ``tier`` whatever its size (the short form's group is small)."""
    snapshots = service.read_model
    if tier in ("vectors", "columns"):
        snapshots.full_group_bytes = 0
    if tier == "columns":
        snapshots.vector_group_bytes = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--quick", action="store_true", help="4 sessions x 50 messages, 10 questions")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--sessions", type=int, default=600)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--bulk", type=int, default=0, help="build N sessions per bulk ingest (0: adds and flushes)")
    parser.add_argument("--group", default=GROUP, help="measure this group of the folder (e.g. partitions.py's)")
    parser.add_argument("--server", action="store_true", help="the data in a real `chroma run` on the data folder")
    parser.add_argument(
        "--tier",
        choices=["auto", "vectors", "columns"],
        help="the read snapshot's tier: as the group's size decides (default), or forced past the full bound "
        "(vectors and messages kept) or past both bounds (columns only); --quick: vectors",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="epimem-big-") as scratch:
        folder = args.data_dir or Path(scratch)
        server = ChromaServer(folder / "chroma-server") if args.server else None
        try:
            measure(args, folder, server)
        finally:
            if server is not None:
                server.stop()


def measure(args: argparse.Namespace, folder: Path, server: ChromaServer | None) -> None:
    from context import Floor

    from api.facade import Epimem

    chroma: dict[str, Any] = {}
    if server is not None:
        server.path.mkdir(parents=True, exist_ok=True)
        server.start()
        chroma = {"chroma_host": "127.0.0.1", "chroma_port": server.port, "chroma_timeout_s": 300}
    if args.quick:
        args.sessions, args.messages, args.questions, args.build = 4, 50, 10, True
    if args.build:
        embedder = remembering_embedder() if args.bulk else None
        service = Epimem.from_settings(data_dir=folder, background=False, embedder=embedder, **chroma)
        build(service, args.sessions, args.messages, args.bulk)
        service.close()
        if not args.quick:
            return
    # Distinct questions for each block (the two first searches, then idle and written search and
    # context): the query-embedding cache never answers a question the floor has to encode.
    group = args.group
    asked = questions()
    blocks = [asked[2 + b * args.questions : 2 + (b + 1) * args.questions] for b in range(4)]
    firsts = []
    for start in range(2):  # the second start finds the snapshot the first one kept at its close
        if server is None:
            close_embedded(folder)  # a new engine, as in a new process
            if start == 0:  # a first start (or one after a crash): no snapshot kept
                shutil.rmtree(folder / FOLDER, ignore_errors=True)
        elif start == 0:  # Chroma cold: a new server process on the same folder
            server.stop()
            server.start()
        started = time.perf_counter()
        service = Epimem.from_settings(data_dir=folder, background=False, **chroma)
        tiered(service, args.tier or ("vectors" if args.quick else "auto"))
        opened = time.perf_counter() - started
        started = time.perf_counter()
        service.embedder.load()  # a server loads its model before it listens (/readyz): not the search's
        model = time.perf_counter() - started
        started = time.perf_counter()
        service.search(group, asked[start], k=10)
        first = time.perf_counter() - started
        deferred = service.read_model.snapshot(group).deferred
        service.read_model.wait_upgrades()  # a big group's vectors and messages, read behind
        whole = time.perf_counter() - started
        cache = service.stats().read_cache
        firsts.append(
            {
                "open": opened,
                "model": model,
                "first_search": first,
                "two_step": deferred,
                "read_whole": whole,
                "kept": getattr(cache, "loads", 0),
            }
        )
        if start == 0:
            service.close()
    vectors = service.vector_count(group)
    c.heading(f"one group of {vectors:,} vectors ({index_name(group)}), {args.questions} questions a block")
    names = ("read from Chroma", "snapshot kept at the last close")
    if server is not None:
        names = ("read from a Chroma server just started", "read from the Chroma server, kept running")
    for name, figures in zip(names, firsts, strict=True):
        c.line(f"first search after a start, {name} (s)", **figures)
    floor = Floor(service)
    for question in asked[-3:]:  # warm-up
        service.search(group, question, k=10)
        floor(group, question)
    block = iter(blocks)
    for mode in ("idle", "written"):
        run = int(time.time())

        def write(i: int, run: int = run) -> None:
            said = [{"id": f"w{run}-{i}", "role": "user", "content": f"Status {i}: all quiet, checking in."}]
            service.add_messages(group, "live-writes", said)

        reads = {
            "search": lambda i, q: service.search(group, q[i], k=10),
            "context": lambda i, q: service.context(group, q[i], token_budget=1000),
        }
        for name, read in reads.items():  # each read paired with the floor (a write before each pair)
            mine = next(block)
            times = c.interleaved(
                {name: lambda i, q=mine, read=read: read(i, q), "floor": lambda i, q=mine: floor(group, q[i])},
                len(mine),
                before=(lambda i, name=name: write(i * 2 + (name == "context"))) if mode == "written" else None,
            )
            figures = {key: c.summary(values) for key, values in times.items()}
            c.line(
                f"{mode} {name} (ms)",
                p50=figures[name]["p50"],
                p95=figures[name]["p95"],
                floor_p50=figures["floor"]["p50"],
                floor_p95=figures["floor"]["p95"],
                ratio_p50=figures[name]["p50"] / figures["floor"]["p50"],
                ratio_p95=figures[name]["p95"] / figures["floor"]["p95"],
            )
    cache = service.stats().read_cache
    if cache is not None:
        snapshot = service.read_model.snapshot(group)
        c.line(
            "read cache",
            tier="full" if snapshot.full else "vectors" if snapshot.directions is not None else "columns",
            full=cache.full_groups,
            records=cache.records,
            patched=cache.extensions,
            builds=cache.builds,
            build_s=cache.build_seconds,
        )
    service.close()


if __name__ == "__main__":
    main()
