"""Many partitions, measured: N sessions x M episodes of one group created through the store.

Reports creation time per partition (each vector goes to its partition AND the group index),
peak and final resident memory, session-scoped and group-wide search latency (facade and raw
Chroma), then restarts as a fresh "server" process (the facade on the same data folder) that
touches every partition with a session-scoped search and reports its resident memory.

    python tests/benchmarks/partitions.py            # full: 1,000 sessions x 20 episodes
    python tests/benchmarks/partitions.py --quick    # short form: 20 x 20
    python tests/benchmarks/partitions.py --recycle-after 0   # never restart embedded Chroma (the naive configuration)
    python tests/benchmarks/partitions.py --sessions 10000 --batch 32   # 200,000 vectors in the group index
    python tests/benchmarks/partitions.py --server --sessions 1000 --batch 32 --no-touch   # a real `chroma run`
    python tests/benchmarks/partitions.py --server --sessions 10000 --batch 32 --no-touch --index-cache 1000 \
        --open-files 4500   # a server sized as docs/scaling.md prescribes: its LRU index cache and open-files limit
    python tests/benchmarks/partitions.py --sessions 10000 --batch 32 --no-touch --text-vectors   # text-like vectors

``--text-vectors``: the records' vectors are the bundled model's (index_graph.text_vectors: every turn of LoCoMo
and REALTALK dev, and the means of windows of 2-7 turns, shuffled), each repeat of one a little off it (noise of
norm 0.3, cosine ~0.96 to it), instead of random unit vectors (HNSW's costliest insert: no structure). The issue's
figure is the random one; this one says what a group of real text costs.

``--batch N`` creates N partitions per store call (``upsert_sessions``, the ingest path: each partition
written, then the group index once for all N) instead of one ``upsert`` per partition.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as c
import numpy as np
import psutil

from api.settings import Settings
from memory.engine.write_log_index import index_write_log
from memory.models import BoundaryReason, Episode, GenerationMethod
from memory.store.codec import index_name, partition_name
from memory.store.factory import Store
from memory.store.records import VectorRecord

sys.path.insert(0, str(c.ROOT / "tests"))
from helpers.servers import ChromaServer  # noqa: E402

GROUP = "bench-group"
DIMENSION = 384
WORDS = (
    "garden painting concert hiking recipe camping museum guitar marathon adoption pottery "
    "birthday vacation beach library festival workshop interview promotion bakery puppy "
    "sunset mountain river career school friendship charity volunteer novel poetry yoga "
    "photography bicycle tournament chess gallery dance wedding family support counseling"
).split()
NAMES = ["Caroline", "Melanie", "Jon", "Gina", "John", "Maria", "Tim", "Audrey", "Andrew", "Joanna"]


def session_id(number: int) -> str:
    return f"session-{number:05d}"


def episode_text(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(WORDS, 3)
    who = rng.sample(NAMES, 2)
    title = f"{who[0]} and {who[1]} talk about {words[0]}"
    content = (
        f"{who[0]} told {who[1]} about the {words[0]} and the {words[1]}; "
        f"{who[1]} mentioned a {words[2]} planned for next month."
    )
    return title, content


class TextVectors:
    """Text-like unit vectors, drawn in turn from a shuffled base; each pass after the first a little off it."""

    def __init__(self, base: np.ndarray, seed: int = 7) -> None:
        self._rng = np.random.default_rng(seed)
        self._base = base[self._rng.permutation(len(base))]
        self._used = 0
        self.size = len(base)

    def __call__(self, count: int) -> np.ndarray:
        positions = np.arange(self._used, self._used + count)
        self._used += count
        vectors = self._base[positions % len(self._base)].copy()
        repeats = positions >= len(self._base)
        noise = self._rng.standard_normal((int(repeats.sum()), vectors.shape[1])).astype(np.float32)
        vectors[repeats] += 0.3 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def make_records(
    number: int,
    episodes: int,
    rng: random.Random,
    nprng: np.random.Generator,
    draw: TextVectors | None = None,
) -> list[VectorRecord]:
    if draw is not None:
        vectors = draw(episodes)
    else:
        vectors = nprng.standard_normal((episodes, DIMENSION)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    start = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(days=number % 365)
    records = []
    for index in range(episodes):
        title, content = episode_text(rng)
        episode = Episode(
            uuid=f"ep-{number:05d}-{index:03d}",
            title=title,
            content=content,
            timestamp=start + timedelta(minutes=10 * index),
            group_id=GROUP,
            session_id=session_id(number),
            message_count=2,
            source_message_ids=(f"m{index}a", f"m{index}b"),
            boundary_reason=BoundaryReason.FLUSH,
            generation=GenerationMethod.OFFLINE,
        )
        records.append(VectorRecord.of_episode(episode, vectors[index]))
    return records


def _cpu_s(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return float(times.user + times.system)


def build(
    store: Store,
    sessions: int,
    episodes: int,
    *,
    batch: int = 1,
    seed: int = 7,
    server: int | None = None,
    draw: TextVectors | None = None,
) -> dict[str, Any]:
    """Create the partitions, ``batch`` per store call; returns creation timings (per partition) and memory.
    ``server``: the pid of a Chroma server, whose CPU time is counted too; ``draw``: text-like vectors."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    store.log.register_group(GROUP)
    chroma = psutil.Process(server) if server else None
    times: list[float] = []
    cpu: list[float] = []  # CPU seconds of the process (every thread): what a shared machine's load barely moves
    server_cpu: list[float] = []
    with c.PeakRss() as peak:
        for first in range(0, sessions, batch):
            numbers = range(first, min(first + batch, sessions))
            records = {session_id(number): make_records(number, episodes, rng, nprng, draw) for number in numbers}
            started, cpu_started, server_started = time.perf_counter(), time.process_time(), _cpu_s(chroma)
            if batch == 1:
                store.vectors.upsert(GROUP, session_id(first), records[session_id(first)])
            else:
                store.vectors.upsert_sessions(GROUP, records)
            times.extend([(time.perf_counter() - started) / len(numbers)] * len(numbers))
            cpu.extend([(time.process_time() - cpu_started) / len(numbers)] * len(numbers))
            server_cpu.extend([(_cpu_s(chroma) - server_started) / len(numbers)] * len(numbers))
    # Mean per partition over each tenth of the build: flat if nothing grows with the group.
    step = max(1, -(-sessions // 10))
    ends = range(step, sessions + step, step)
    return {
        "creation": c.summary(times),
        "blocks": {f"{end}": 1000 * float(np.mean(times[end - step : end])) for end in ends},
        "cpu_blocks": {f"{end}": 1000 * float(np.mean(cpu[end - step : end])) for end in ends},
        "server_cpu_blocks": {f"{end}": 1000 * float(np.mean(server_cpu[end - step : end])) for end in ends},
        "cpu_ms": 1000 * float(np.mean(cpu)),
        "server_cpu_ms": 1000 * float(np.mean(server_cpu)),
        "total_s": sum(times),
        "peak_rss_mb": peak.peak,
        "rss_after_mb": c.rss_mb(),
        "restarts": store.connection.restarts,
    }


def query_texts(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [f"when did {rng.choice(NAMES)} go to the {rng.choice(WORDS)} {index}" for index in range(count)]


class RawFloor:
    """One raw Chroma query (query embedding included) through the store's own client, inside its
    gate: embedded Chroma may restart between calls, and a handle belongs to one engine. ``keep``
    reuses a collection's handle while the engine lives, as the store does."""

    def __init__(self, store: Store, embedder: Any) -> None:
        self._connection = store.connection
        self._embedder = embedder
        self._handles: dict[str, Any] = {}
        self._engine = -1  # the engine (restart count) the kept handles belong to

    def query(self, collection_name: str, text: str, *, keep: bool = False) -> None:
        vector = self._embedder.embed_batch([text])[0]
        with self._connection.call():
            if self._engine != self._connection.restarts:
                self._handles.clear()
                self._engine = self._connection.restarts
            client = self._connection.client_for(collection_name)  # embedded: partitions have their own engine
            collection = self._handles.get(collection_name) or client.get_collection(collection_name)
            if keep:
                self._handles[collection_name] = collection
            collection.query(query_embeddings=[vector], n_results=10, include=["documents", "metadatas", "distances"])


def search_latencies(service: Any, sessions: int, queries: int) -> dict[str, dict[str, float]]:
    """Facade search vs one raw Chroma query (query embedding included in both, no cache hits)."""
    store: Store = service.memory.store
    embedder = service.embedder
    rng = random.Random(3)
    texts = query_texts(queries * 4)
    partitions = [rng.randrange(sessions) for _ in range(queries)]
    first_s, _ = c.timed(lambda: service.search(GROUP, "warm-up query", k=10))  # builds the snapshot + BM25
    c.line("first group search, reads the group (s)", seconds=first_s)
    floor = RawFloor(store, embedder)

    times = c.interleaved(
        {
            "session_facade": lambda i: service.search(GROUP, texts[i], k=10, session_ids=[session_id(partitions[i])]),
            "session_raw": lambda i: floor.query(partition_name(GROUP, session_id(partitions[i])), texts[queries + i]),
            "group_facade": lambda i: service.search(GROUP, texts[2 * queries + i], k=10),
            "group_raw": lambda i: floor.query(index_name(GROUP), texts[3 * queries + i], keep=True),
        },
        queries,
    )
    return {name: c.summary(values) for name, values in times.items()}


def server_touch(data_dir: Path, sessions: int, recycle_after: int, max_open: int) -> dict[str, Any]:
    """In this process: a fresh service on the data folder touches every partition once."""
    from api.facade import Epimem

    before = c.rss_mb()
    service = Epimem.from_settings(
        data_dir=data_dir, background=False, chroma_recycle_after=recycle_after, chroma_max_open=max_open
    )
    loaded = c.rss_mb()
    texts = query_texts(sessions)
    times = []
    with c.PeakRss() as peak:
        for number in range(sessions):
            started = time.perf_counter()
            service.search(GROUP, texts[number], k=5, session_ids=[session_id(number)])
            times.append(time.perf_counter() - started)
        group = [c.timed(lambda t=t: service.search(GROUP, t, k=10))[0] for t in texts[:20]]
    return {
        "rss_start_mb": before,
        "rss_model_loaded_mb": loaded,
        "rss_after_touch_mb": c.rss_mb(),
        "peak_rss_mb": peak.peak,
        "session_search": c.summary(times),
        "group_search": c.summary(group),
        "open_handles": service.memory.store.admin.open_collections,
        "engine_restarts": service.memory.store.connection.restarts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form (20 sessions)")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1, help="partitions created per store call (upsert_sessions)")
    parser.add_argument("--queries", type=int)
    parser.add_argument(
        "--recycle-after", type=int, help="collections touched before embedded Chroma restarts (0 = never)"
    )
    parser.add_argument("--max-open", type=int, help="collection handles kept open; default: settings")
    parser.add_argument("--data-dir", type=Path, help="keep the data here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="the --data-dir holds the partitions already: search only")
    parser.add_argument("--no-touch", action="store_true", help="skip the fresh server touching every partition")
    parser.add_argument("--server", action="store_true", help="against a real `chroma run` on the data folder")
    parser.add_argument("--index-cache", type=int, help="with --server: Chroma's LRU capacity of loaded indexes")
    parser.add_argument("--open-files", type=int, help="with --server: the server's open-files limit")
    parser.add_argument(
        "--write-log-index",
        action="store_true",
        help="with --server: index the server's write log first (memory.engine.write_log_index)",
    )
    parser.add_argument(
        "--text-vectors", action="store_true", help="the bundled model's vectors of dev chats, not random"
    )
    parser.add_argument("--serve-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = Settings()
    recycle_after = defaults.chroma_recycle_after if args.recycle_after is None else args.recycle_after
    max_open = defaults.chroma_max_open if args.max_open is None else args.max_open
    sessions = args.sessions or (20 if args.quick else 1000)
    queries = args.queries or (10 if args.quick else 100)

    if args.serve_only:
        assert args.data_dir is not None
        print("JSON " + json.dumps(server_touch(args.data_dir, sessions, recycle_after, max_open)))
        return

    with tempfile.TemporaryDirectory(prefix="epimem-partitions-") as scratch:
        data_dir = args.data_dir or Path(scratch)
        server = (
            ChromaServer(data_dir / "chroma-server", index_cache=args.index_cache, open_files=args.open_files)
            if args.server
            else None
        )
        if server is not None:
            server.path.mkdir(parents=True, exist_ok=True)
            server.start()
            if args.write_log_index:  # the server created its database: stop it, index, start again
                server.stop()
                index_write_log(server.path)
                server.start()
        try:
            run(
                args,
                data_dir,
                server,
                sessions=sessions,
                queries=queries,
                recycle_after=recycle_after,
                max_open=max_open,
            )
        finally:
            if server is not None:
                server.stop()


def run(
    args: argparse.Namespace,
    data_dir: Path,
    server: ChromaServer | None,
    *,
    sessions: int,
    queries: int,
    recycle_after: int,
    max_open: int,
) -> None:
    from api.facade import Epimem

    rss_start = c.rss_mb()
    chroma: dict[str, Any] = {}
    if server is not None:  # a generous timeout: the machine is shared and loaded
        chroma = {"chroma_host": "127.0.0.1", "chroma_port": server.port, "chroma_timeout_s": 300}
    service = Epimem.from_settings(
        data_dir=data_dir,
        background=False,
        chroma_recycle_after=recycle_after,
        chroma_max_open=max_open,
        **chroma,
    )
    rss_loaded = c.rss_mb()
    c.heading(
        f"partitions: {sessions} sessions x {args.episodes} episodes, "
        f"recycle after {recycle_after}, max_open {max_open}, {args.batch} per store call"
    )
    c.line("rss before / model+store loaded MB", before=rss_start, loaded=rss_loaded)
    if not args.reuse:
        pid = server.process.pid if server is not None and server.process is not None else None
        draw = None
        if args.text_vectors:
            from index_graph import text_vectors

            draw = TextVectors(text_vectors(service.embedder))
            c.line("text-like vectors", base=draw.size)
        built = build(service.memory.store, sessions, args.episodes, batch=args.batch, server=pid, draw=draw)
        c.line(
            "creation per partition (ms)",
            p50=built["creation"]["p50"],
            p95=built["creation"]["p95"],
            mean=built["creation"]["mean"],
            total_s=built["total_s"],
        )
        c.line("creation per partition (ms), mean up to", **{k: round(v, 1) for k, v in built["blocks"].items()})
        c.line("  CPU ms per partition, mean up to", **{k: round(v, 1) for k, v in built["cpu_blocks"].items()})
        c.line("  CPU ms per partition, all", mean=built["cpu_ms"])
        if server is not None:
            blocks = {k: round(v, 1) for k, v in built["server_cpu_blocks"].items()}
            c.line("  Chroma server's CPU ms per partition, mean up to", **blocks)
            c.line("  Chroma server's CPU ms per partition, all", mean=built["server_cpu_ms"])
        c.line("rss during/after creation MB", peak=built["peak_rss_mb"], after=built["rss_after_mb"])
        c.line("engine restarts while creating", restarts=built["restarts"])
    c.line("data folder on disk MB", total=c.disk_mb(data_dir), vectors_stored=sessions * args.episodes * 2)
    latencies = search_latencies(service, sessions, queries)
    for name, figures in latencies.items():
        c.line(f"search {name} (ms)", **figures)
    c.line(
        "ratio facade/raw p50 (p95)",
        session=latencies["session_facade"]["p50"] / latencies["session_raw"]["p50"],
        session_p95=latencies["session_facade"]["p95"] / latencies["session_raw"]["p95"],
        group=latencies["group_facade"]["p50"] / latencies["group_raw"]["p50"],
        group_p95=latencies["group_facade"]["p95"] / latencies["group_raw"]["p95"],
    )
    if server is not None and server.process is not None:
        chroma_process = psutil.Process(server.process.pid)
        c.line(
            "Chroma server after the searches",
            open_files=chroma_process.num_fds(),
            rss_mb=chroma_process.memory_info().rss / 2**20,
            index_cache=args.index_cache or "unbounded",
            open_files_limit=args.open_files or "inherited",
        )
    service.close()
    del service
    if args.no_touch or server is not None:  # with a server, the memory is the server's
        return

    # A fresh process, like a restarted server: opens the facade, touches every partition.
    command = [sys.executable, __file__, "--serve-only", "--data-dir", str(data_dir), "--sessions", str(sessions)]
    command += ["--recycle-after", str(recycle_after), "--max-open", str(max_open)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    served = json.loads(next(row[5:] for row in output.splitlines() if row.startswith("JSON ")))
    c.heading(f"fresh server process touching all {sessions} partitions")
    c.line(
        "rss start / loaded / after MB",
        start=served["rss_start_mb"],
        loaded=served["rss_model_loaded_mb"],
        after=served["rss_after_touch_mb"],
        peak=served["peak_rss_mb"],
    )
    c.line("session search, cold partitions (ms)", **served["session_search"])
    c.line("group search (ms)", **served["group_search"])
    c.line("open handles / engine restarts", handles=served["open_handles"], restarts=served["engine_restarts"])


if __name__ == "__main__":
    main()
