"""The group index's HNSW build parameter, measured: insert cost and recall against exact neighbours.

One raw Chroma collection per ``ef_construction`` value, filled 640 records per upsert (32 partitions
of 20, as ``upsert_sessions`` writes the group index) with epimem-shaped records (an episode's 12
metadata keys and a sentence), then queried with LoCoMo questions: recall@10 and @50 of Chroma's answer
against the exact cosine neighbours, unfiltered and with a filter half the records pass.

The vectors: every turn of LoCoMo dev and REALTALK dev embedded with the bundled model (8,664 distinct
texts), and the normalised mean of every window of 2-7 consecutive turns of a conversation (an
episode-like vector: 52,200 more), shuffled (``--seed``); or ``--random`` unit Gaussian vectors (the
hardest case for a graph index: no structure).

    python tests/benchmarks/index_graph.py --ef 100,50             # ~61,000 vectors
    python tests/benchmarks/index_graph.py --ef 100,50 --seed 4    # another insertion order
    python tests/benchmarks/index_graph.py --random 64000 --ef 100,50,32
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _common as c
import chromadb
import numpy as np
from benchmark_data import locomo_file, realtalk_folder
from chromadb.config import Settings as ChromaSettings

BATCH = 640


def conversations() -> list[list[str]]:
    found = []
    for conversation in json.loads(locomo_file().read_text()):
        sessions = conversation["conversation"]
        keys = sorted((k for k, v in sessions.items() if isinstance(v, list)), key=lambda k: int(k.split("_")[-1]))
        found.append([f"{t['speaker']}: {t['text']}" for k in keys for t in sessions[k]])
    folder = realtalk_folder()
    for path in sorted(folder.glob("*.json")) if folder else []:
        chat = json.loads(path.read_text())
        turns = [t for k, v in chat.items() if k.startswith("session_") and isinstance(v, list) for t in v]
        found.append([f"{t.get('speaker', '')}: {t.get('clean_text') or t.get('text', '')}" for t in turns])
    return found


def text_vectors(embedder: object) -> np.ndarray:
    chats = conversations()
    texts = list(dict.fromkeys(turn for chat in chats for turn in chat))
    single = np.asarray(embedder.embed_batch(texts), dtype=np.float32)  # type: ignore[attr-defined]
    position = {text: index for index, text in enumerate(texts)}
    windows = []
    for chat in chats:
        ids = [position[turn] for turn in chat]
        for width in range(2, 8):
            for start in range(len(ids) - width + 1):
                mean = single[ids[start : start + width]].mean(axis=0)
                windows.append(mean / np.linalg.norm(mean))
    return np.concatenate([single, np.asarray(windows, dtype=np.float32)])


def build(vectors: np.ndarray, ef: int, folder: Path) -> tuple[chromadb.Collection, list[float]]:
    client = chromadb.PersistentClient(path=str(folder), settings=ChromaSettings(anonymized_telemetry=False))
    metadata = {"hnsw:space": "cosine", "hnsw:construction_ef": ef}
    collection = client.create_collection(f"index-{ef}", metadata=metadata, embedding_function=None)
    cpu = []
    for first in range(0, len(vectors), BATCH):
        ids = [f"r{first + i}" for i in range(len(vectors[first : first + BATCH]))]
        metadatas = [
            {
                "kind": "episode",
                "group_id": "bench-group",
                "session_id": f"session-{(first + i) // 20:05d}",
                "episode_id": record_id,
                "title": "Caroline and Melanie talk about the garden",
                "ts": 1.7e9 + first + i,
                "created": 1.7e9 + first + i,
                "content_type": "string",
                "generation": "offline",
                "boundary": "flush",
                "message_count": 2,
                "source_ids": '["m1a", "m1b"]',
                "half": (first + i) % 2,
            }
            for i, record_id in enumerate(ids)
        ]
        documents = [f"Caroline told Melanie about the garden; a hike is planned next month ({i})." for i in ids]
        started = time.process_time()
        collection.upsert(ids=ids, embeddings=vectors[first : first + BATCH], documents=documents, metadatas=metadatas)  # type: ignore[arg-type]
        cpu.append((time.process_time() - started) * 20 / len(ids))
    return collection, cpu


def recall(collection: chromadb.Collection, vectors: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    similarity = queries @ vectors.T
    found = {}
    for name, where, allowed in (("all", None, np.arange(len(vectors))), ("half", {"half": 0}, None)):
        allowed = np.arange(0, len(vectors), 2) if allowed is None else allowed
        exact = allowed[np.argsort(-similarity[:, allowed], axis=1)[:, :50]]
        for k in (10, 50):
            got = collection.query(query_embeddings=queries, n_results=k, where=where, include=[])["ids"]  # type: ignore[arg-type]
            shares = [len({int(i[1:]) for i in ids} & set(exact[j, :k].tolist())) / k for j, ids in enumerate(got)]
            found[f"{name}@{k}"] = float(np.mean(shares))
            found[f"{name}@{k}_p10"] = float(np.percentile(shares, 10))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ef", default="100,50", help="ef_construction values, comma-separated")
    parser.add_argument("--seed", type=int, default=3, help="the insertion order")
    parser.add_argument("--random", type=int, default=0, help="this many random unit vectors instead")
    parser.add_argument("--queries", type=int, default=400)
    args = parser.parse_args()
    from memory.embedding.embedder import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    questions = [q["question"] for conversation in json.loads(locomo_file().read_text()) for q in conversation["qa"]]
    queries = np.asarray(embedder.embed_batch(questions[::2][: args.queries]), dtype=np.float32)
    rng = np.random.default_rng(args.seed)
    if args.random:
        vectors = rng.standard_normal((args.random, queries.shape[1])).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    else:
        vectors = text_vectors(embedder)
        vectors = vectors[rng.permutation(len(vectors))]
    c.heading(f"group index: {len(vectors)} vectors, {len(queries)} questions, {BATCH} per upsert")
    for ef in (int(value) for value in args.ef.split(",")):
        with tempfile.TemporaryDirectory(prefix="epimem-graph-") as folder:
            collection, cpu = build(vectors, ef, Path(folder))
            fifth = len(cpu) // 5
            c.line(
                f"ef_construction {ef}: CPU ms per 20 vectors",
                mean=1000 * float(np.mean(cpu)),
                last_fifth=1000 * float(np.mean(cpu[-fifth:])),
            )
            c.line(f"ef_construction {ef}: recall vs exact", **recall(collection, vectors, queries))


if __name__ == "__main__":
    main()
