"""Raw chromadb's own cost of creating partitions, without epimem: the floor of ``partitions.py``.

N collections of 20 vectors each, created ``--batch`` at a time, and the same vectors upserted into
one group-index collection once per batch, as ``upsert_sessions`` does. The engine holding the new
collections is restarted every ``--recycle-after`` collections (as epimem bounds embedded Chroma's
memory); the group index lives in a second embedded engine on another folder (``--index-apart``,
the default) that is never restarted, or in the same engine (``--index-together``), where each
restart reloads it. Prints CPU milliseconds of the process per partition by tenth of the build:
creating the collection with its 20 vectors, upserting into the index, the restarts.

    python tests/benchmarks/partition_floor.py --sessions 10000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common as c
import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings

from memory.engine.write_log_index import index_write_log

DIMENSION = 384


def open_client(path: Path) -> chromadb.ClientAPI:
    settings = ChromaSettings(anonymized_telemetry=False, is_persistent=True, persist_directory=str(path))
    return chromadb.PersistentClient(path=str(path), settings=settings)


def stop_client(path: Path) -> None:
    from chromadb.api.shared_system_client import SharedSystemClient

    system = SharedSystemClient._identifier_to_system.pop(str(path), None)
    SharedSystemClient._identifier_to_refcount.pop(str(path), None)
    if system is not None:
        system.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--recycle-after", type=int, default=32)
    parser.add_argument("--index-together", action="store_true", help="the index in the partitions' engine")
    parser.add_argument(
        "--write-log-index", action="store_true", help="index Chroma's write log (memory.engine.write_log_index)"
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--start", type=int, default=0, help="the first collection's number (continue a --data-dir)")
    parser.add_argument("--every", type=int, default=500, help="print the means of every this many collections")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="epimem-floor-") as scratch:
        root = args.data_dir or Path(scratch)
        parts_path = (root / "partitions").resolve()
        index_path = parts_path if args.index_together else (root / "index").resolve()
        parts_path.mkdir(parents=True, exist_ok=True)
        index_path.mkdir(parents=True, exist_ok=True)
        if args.write_log_index:
            index_write_log(parts_path)
            index_write_log(index_path)
        parts = open_client(parts_path)
        index_client = parts if args.index_together else open_client(index_path)
        index = index_client.get_or_create_collection("index", embedding_function=None)
        create_cpu: list[float] = []
        index_cpu: list[float] = []
        restart_cpu: list[float] = []
        touched = 0
        with c.PeakRss() as peak:
            for first in range(args.start, args.sessions, args.batch):
                numbers = range(first, min(first + args.batch, args.sessions))
                batch_vectors = []
                started = time.process_time()
                for number in numbers:
                    vectors = rng.standard_normal((args.episodes, DIMENSION)).astype(np.float32)
                    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                    ids = [f"ep-{number:05d}-{i:03d}" for i in range(args.episodes)]
                    documents = [f"episode {i} of session {number}" for i in range(args.episodes)]
                    metadatas = [{"session_id": f"s{number}", "kind": "episode"} for _ in ids]
                    collection = parts.get_or_create_collection(f"p-{number:05d}", embedding_function=None)
                    collection.upsert(ids=ids, embeddings=vectors, documents=documents, metadatas=metadatas)  # type: ignore[arg-type]
                    batch_vectors.append((ids, vectors, documents, metadatas))
                created = time.process_time()
                if args.index_together:  # a handle belongs to one engine
                    index = parts.get_or_create_collection("index", embedding_function=None)
                index.upsert(
                    ids=[i for ids, *_ in batch_vectors for i in ids],
                    embeddings=np.concatenate([v for _, v, _, _ in batch_vectors]),
                    documents=[d for *_, ds, _ in batch_vectors for d in ds],
                    metadatas=[m for *_, ms in batch_vectors for m in ms],  # type: ignore[arg-type]
                )
                indexed = time.process_time()
                touched += len(numbers) + (1 if args.index_together else 0)
                if args.recycle_after and touched > args.recycle_after:
                    stop_client(parts_path)
                    if args.write_log_index:
                        index_write_log(parts_path)
                    parts = open_client(parts_path)
                    touched = 0
                restarted = time.process_time()
                share = len(numbers)
                create_cpu += [(created - started) / share] * share
                index_cpu += [(indexed - created) / share] * share
                restart_cpu += [(restarted - indexed) / share] * share
                done = len(create_cpu)
                if done // args.every != (done - share) // args.every:  # the last block, as it goes
                    block = slice(-args.every, None)
                    means = [1000 * float(np.mean(v[block])) for v in (create_cpu, index_cpu, restart_cpu)]
                    c.line(
                        f"CPU ms per partition, {args.every} up to {numbers[-1] + 1}",
                        create=means[0],
                        index=means[1],
                        restart=means[2],
                        all=sum(means),
                        rss_mb=c.rss_mb(),
                    )
                    sys.stdout.flush()
        built = len(create_cpu)
        step = max(1, -(-built // 10))

        def tenths(values: list[float]) -> dict[str, float]:
            ends = range(step, built + step, step)
            return {f"{args.start + end}": round(1000 * float(np.mean(values[end - step : end])), 1) for end in ends}

        c.heading(
            f"raw chromadb: {args.sessions} collections x {args.episodes}, {args.batch} per batch, restart after "
            f"{args.recycle_after}, index {'in the same engine' if args.index_together else 'in its own engine'}, "
            f"write log {'indexed' if args.write_log_index else 'as Chroma leaves it'}"
        )
        for name, values in (("create", create_cpu), ("index", index_cpu), ("restart", restart_cpu)):
            blocks = {
                f"{end}": round(1000 * float(np.mean(values[end - step : end])), 1)
                for end in range(step, args.sessions + step, step)
            }
            c.line(f"CPU ms per partition, {name}, mean up to", **blocks)
        total = [a + b + r for a, b, r in zip(create_cpu, index_cpu, restart_cpu, strict=True)]
        blocks = {
            f"{end}": round(1000 * float(np.mean(total[end - step : end])), 1)
            for end in range(step, args.sessions + step, step)
        }
        c.line("CPU ms per partition, all, mean up to", **blocks)
        c.line("CPU ms per partition, all", mean=1000 * float(np.mean(total)), peak_rss_mb=peak.peak)


if __name__ == "__main__":
    main()
