"""What the record format costs raw chromadb: the earlier ones against the one memory.store.codec writes.

- ``document``: the record's text as Chroma's document and every metadata key on its own (epimem's
  first format; Chroma indexes each document in a trigram full-text table and each key as a
  row of its own);
- ``keys``: the second format — the text in metadata (``text``), the keys never filtered on nor updated
  in one JSON value (``fields``);
- ``body``: the third format — the text and those keys in one value behind the time of the write, so
  that it lands at the end of Chroma's SQLite index of string values instead of a random page of it;
- ``payload``: ``codec.written`` — the same stamped payload under ``body`` when it fits in one metadata value
  (Chroma Cloud's 4,096 bytes), else as the record's document (16,384 bytes; longer: pieces);
- ``documents``: the stamped payload as the document whatever its length (what ``payload`` writes for a long
  record), to see what a document costs.

``--words N``: words of each episode's content (70 by default, ~260 characters: every payload fits in a
metadata value; 1,200, ~4,500 characters: none of them does).

The same episodes (codec.episode_metadata of real Episode objects, ~70-word contents) are written
into N partitions of 20 records, ``--batch`` partitions at a time, each batch also upserted into one
group-index collection (as ``upsert_sessions`` does), in one embedded engine with Chroma's write log
indexed (memory.engine.write_log_index). Then every record's metadata is read back from the index
(what a first group-wide search after a start does). The two formats alternate, ``--repeats`` times
each; medians printed.

``--grown DATA_DIR``: the formats' writes on a grown data folder instead (one ``partitions.py
--data-dir`` built, **a scratch copy**: this writes into it), where the index of string values no longer
fits in memory: ``--rounds`` rounds of ``--batch`` new partitions per format, the formats in a shuffled
order each round, the engines stopped every other round (as epimem's restarts do); wall and CPU ms per
partition, medians.

    python tests/benchmarks/record_format.py --sessions 480 --repeats 3
    python tests/benchmarks/record_format.py --grown /tmp/copy-of-p10k --rounds 16
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (makes the repository importable, offline)
import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings
from partition_floor import stop_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.record_formats import second_format, third_format  # noqa: E402

from memory.engine.write_log_index import index_write_log
from memory.models import BoundaryReason, Episode, GenerationMethod
from memory.store import codec

DIMENSION = 384
WORDS = "the a of to and in is it you that he was for on are with as his they be at one have this from".split()


def episodes(sessions: int, per_session: int, rng: np.random.Generator, words: int = 70) -> list[list[Episode]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        [
            Episode(
                title=" ".join(rng.choice(WORDS, 6)),
                content=" ".join(rng.choice(WORDS, words)),
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


FORMATS = ("document", "keys", "body", "payload", "documents")


def columns(fmt: str, session: list[Episode]) -> dict[str, Any]:
    ids = [episode.uuid for episode in session]
    texts = [episode.content for episode in session]
    metadatas = [codec.episode_metadata(episode) for episode in session]
    if fmt == "document":
        return {"ids": ids, "documents": texts, "metadatas": metadatas}
    if fmt == "keys":
        return {"ids": ids, "metadatas": [second_format(t, m) for t, m in zip(texts, metadatas, strict=True)]}
    if fmt == "body":
        return {"ids": ids, "metadatas": [third_format(t, m) for t, m in zip(texts, metadatas, strict=True)]}
    if fmt == "documents":
        bodies = [third_format(t, m) for t, m in zip(texts, metadatas, strict=True)]
        return {
            "ids": ids,
            "documents": [b.pop(codec.BODY_KEY) for b in bodies],
            "metadatas": [b or None for b in bodies],
        }
    return codec.written(ids, texts, metadatas)


def write_batch(client: Any, index: Any, records: list[dict[str, Any]], names: list[str]) -> float:
    """Each partition created and written, then the group index once for all (as ``upsert_sessions``);
    returns the perf_counter when the partitions were written."""
    for record, name in zip(records, names, strict=True):
        partition = client.get_or_create_collection(name, embedding_function=None, metadata={"hnsw:space": "cosine"})
        partition.upsert(**record)
    partitions_done = time.perf_counter()
    merged = {key: [v for r in records for v in r[key]] for key in records[0] if key != "embeddings"}
    index.upsert(**merged, embeddings=np.concatenate([r["embeddings"] for r in records]))
    return partitions_done


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
            numbers = range(first, min(first + batch, len(data)))
            written = [{**columns(fmt, data[s]), "embeddings": vectors[s]} for s in numbers]
            write_batch(client, index, written, [f"p-{s}" for s in numbers])
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


def grown(data_dir: Path, rounds: int, batch: int, per_session: int) -> None:
    """The formats' writes into a grown folder's engines: new partitions and the group index."""
    engines = {"partitions": data_dir / "chroma-partitions", "index": data_dir / "chroma"}
    rng = np.random.default_rng(5)
    order = random.Random(5)
    figures: dict[str, list[tuple[float, float, float]]] = {fmt: [] for fmt in FORMATS}
    made, run = 0, uuid.uuid4().hex[:8]
    for round_number in range(rounds):
        if round_number % 2 == 0:
            for path in engines.values():
                stop_client(path)
        clients = {
            name: chromadb.PersistentClient(
                path=str(path),
                settings=ChromaSettings(anonymized_telemetry=False, is_persistent=True, persist_directory=str(path)),
            )
            for name, path in engines.items()
        }
        index = clients["index"].get_collection(codec.index_name("bench-group"), embedding_function=None)
        for fmt in order.sample(FORMATS, len(FORMATS)):
            data = episodes(batch, per_session, rng)
            wall, cpu = time.perf_counter(), time.process_time()
            records = []
            for session in data:
                v = rng.standard_normal((per_session, DIMENSION)).astype(np.float32)
                records.append({**columns(fmt, session), "embeddings": v / np.linalg.norm(v, axis=1, keepdims=True)})
            names = [f"record-format-{run}-{made + i}" for i in range(batch)]
            made += batch
            partitions_done = write_batch(clients["partitions"], index, records, names)
            done = time.perf_counter()
            ms_per_partition = 1000 / batch
            figures[fmt].append(
                (
                    (done - wall) * ms_per_partition,
                    (time.process_time() - cpu) * ms_per_partition,
                    (partitions_done - wall) * ms_per_partition,
                )
            )
    for path in engines.values():
        stop_client(path)
    print(f"{data_dir}: {rounds} rounds of {batch} partitions x {per_session} records per format")
    body = statistics.median(w for w, _, _ in figures["body"])
    for fmt, runs in figures.items():
        wall = statistics.median(w for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        own = statistics.median(p for _, _, p in runs)
        print(
            f"{fmt:>8}: ms per partition, wall {wall:.1f} (the partitions {own:.1f}, the index {wall - own:.1f}), "
            f"CPU {cpu:.1f}; wall / body's {wall / body:.2f}"
        )
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=480)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--words", type=int, default=70, help="words of each episode's content")
    parser.add_argument("--quick", action="store_true", help="a short form (96 partitions, one repeat)")
    parser.add_argument("--grown", type=Path, help="a scratch copy of a grown data folder (partitions.py --data-dir)")
    parser.add_argument("--rounds", type=int, default=16, help="with --grown: rounds of --batch partitions per format")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.repeats = 96, 1
    rng = np.random.default_rng(1)
    data = episodes(args.sessions, args.episodes, rng, args.words)
    vectors = []
    for _ in data:
        v = rng.standard_normal((args.episodes, DIMENSION)).astype(np.float32)
        vectors.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    if args.grown:
        grown(args.grown, args.rounds, args.batch, args.episodes)
        return
    figures: dict[str, list[tuple[float, float]]] = {fmt: [] for fmt in FORMATS}
    for _ in range(args.repeats):
        for fmt in figures:
            figures[fmt].append(run(fmt, data, vectors, args.batch))
    records = args.sessions * args.episodes
    print(
        f"{args.sessions} partitions x {args.episodes} records of {args.words} words, batches of {args.batch}, "
        f"{args.repeats} repeats"
    )
    medians = {}
    for fmt, runs in figures.items():
        write = statistics.median(w for w, _ in runs)
        read = statistics.median(r for _, r in runs)
        medians[fmt] = (write, read)
        print(f"{fmt:>8}: write CPU per partition (ms) {write:.1f}; read all {records} records back (s) {read:.2f}")
    (bw, br) = medians["body"]
    for fmt in ("document", "keys", "payload", "documents"):
        print(f"ratio {fmt} / body: write {medians[fmt][0] / bw:.2f}, read {medians[fmt][1] / br:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
