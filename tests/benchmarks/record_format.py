"""What the record format costs raw chromadb: the old one against the one memory.store.codec writes.

- ``document``: the record's text as Chroma's document and every metadata key on its own (epimem's
  format until 2026-12; Chroma indexes each document in a trigram full-text table and each key as a
  row of its own);
- ``packed``: ``codec.written`` — the text in metadata, the keys never filtered on nor updated in
  one JSON value.

The same episodes (codec.episode_metadata of real Episode objects, ~70-word contents) are written
into N partitions of 20 records, ``--batch`` partitions at a time, each batch also upserted into one
group-index collection (as ``upsert_sessions`` does), in one embedded engine with Chroma's write log
indexed (memory.store.write_log_index). Then every record's metadata is read back from the index
(what a first group-wide search after a start does). The two formats alternate, ``--repeats`` times
each; medians printed.

    python tests/benchmarks/record_format.py --sessions 480 --repeats 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (makes the repository importable, offline)
import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings
from partition_floor import stop_client

from memory.models import BoundaryReason, Episode, GenerationMethod
from memory.store import codec
from memory.store.write_log_index import index_write_log

DIMENSION = 384
WORDS = "the a of to and in is it you that he was for on are with as his they be at one have this from".split()


def episodes(sessions: int, per_session: int, rng: np.random.Generator) -> list[list[Episode]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        [
            Episode(
                title=" ".join(rng.choice(WORDS, 6)),
                content=" ".join(rng.choice(WORDS, 70)),
                timestamp=start + timedelta(days=s, minutes=i),
                group_id="group",
                session_id=f"session-{s}",
                source_message_ids=tuple(f"m-{s}-{i}-{j}" for j in range(8)),
                message_count=8,
                boundary_reason=BoundaryReason.TIME_GAP,
                generation=GenerationMethod.OFFLINE,
            )
            for i in range(per_session)
        ]
        for s in range(sessions)
    ]


def columns(fmt: str, session: list[Episode]) -> dict[str, Any]:
    ids = [episode.uuid for episode in session]
    texts = [episode.content for episode in session]
    metadatas = [codec.episode_metadata(episode) for episode in session]
    if fmt == "document":
        return {"ids": ids, "documents": texts, "metadatas": metadatas}
    return codec.written(ids, texts, metadatas)


def run(fmt: str, data: list[list[Episode]], vectors: list[np.ndarray], batch: int) -> tuple[float, float]:
    """CPU ms per partition for the writes (the first two batches left out: warm-up); s to read all back."""
    folder = Path(tempfile.mkdtemp(prefix=f"record-format-{fmt}-"))
    try:
        index_write_log(folder)
        settings = ChromaSettings(anonymized_telemetry=False, is_persistent=True, persist_directory=str(folder))
        client = chromadb.PersistentClient(path=str(folder), settings=settings)
        index = client.get_or_create_collection("index", embedding_function=None, metadata={"hnsw:space": "cosine"})
        spent, counted = 0.0, 0
        for first in range(0, len(data), batch):
            started = time.process_time()
            written = []
            for s in range(first, min(first + batch, len(data))):
                record = {**columns(fmt, data[s]), "embeddings": vectors[s]}
                partition = client.get_or_create_collection(
                    f"p-{s}", embedding_function=None, metadata={"hnsw:space": "cosine"}
                )
                partition.upsert(**record)
                written.append(record)
            merged = {key: [v for r in written for v in r[key]] for key in written[0] if key != "embeddings"}
            index.upsert(**merged, embeddings=np.concatenate([r["embeddings"] for r in written]))
            if first >= 2 * batch:
                spent += time.process_time() - started
                counted += len(written)
        started = time.perf_counter()
        found = index.get(include=["documents", "metadatas"])
        rows = codec.rows_of(found)
        read_s = time.perf_counter() - started
        if len(rows) != sum(len(s) for s in data) or any(not text for _, text, _ in rows):
            raise SystemExit(f"{fmt}: read back {len(rows)} records, some without their text")
        return 1000 * spent / max(1, counted), read_s
    finally:
        stop_client(folder)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=480)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a short form (96 partitions, one repeat)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.repeats = 96, 1
    rng = np.random.default_rng(1)
    data = episodes(args.sessions, args.episodes, rng)
    vectors = []
    for _ in data:
        v = rng.standard_normal((args.episodes, DIMENSION)).astype(np.float32)
        vectors.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    figures: dict[str, list[tuple[float, float]]] = {"document": [], "packed": []}
    for _ in range(args.repeats):
        for fmt in figures:
            figures[fmt].append(run(fmt, data, vectors, args.batch))
    records = args.sessions * args.episodes
    print(f"{args.sessions} partitions x {args.episodes} records, batches of {args.batch}, {args.repeats} repeats")
    medians = {}
    for fmt, runs in figures.items():
        write = statistics.median(w for w, _ in runs)
        read = statistics.median(r for _, r in runs)
        medians[fmt] = (write, read)
        print(f"{fmt:>8}: write CPU per partition (ms) {write:.1f}; read all {records} records back (s) {read:.2f}")
    (dw, dr), (pw, pr) = medians["document"], medians["packed"]
    print(f"ratio document / packed: write {dw / pw:.2f}, read {dr / pr:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
