"""Query vs the store floor, in one run, as ratios of medians (and p95).

- session-scoped: facade search in one session vs one raw Chroma query on that partition
  (query embedding included in both, never from the cache). Target p50 ratio <= 1.5.
- group-wide: facade search over N sessions x M episodes vs one raw query on a single
  collection holding the same N x M vectors. Target p95 ratio <= 3.
- the embedding cache: a repeated query (hit) vs a new one (miss).

    python tests/benchmarks/query.py            # full: 1,000 sessions x 20 episodes
    python tests/benchmarks/query.py --quick    # short form: 20 x 20
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import _common as c
import numpy as np
from partitions import GROUP, RawFloor, build, query_texts, session_id

from memory.store.codec import index_name, partition_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form (20 sessions)")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--queries", type=int)
    parser.add_argument("--data-dir", type=Path, help="reuse (or keep) a build, e.g. one made by partitions.py")
    args = parser.parse_args()
    sessions = args.sessions or (20 if args.quick else 1000)
    queries = args.queries or (15 if args.quick else 200)

    from api.facade import Epimem

    with tempfile.TemporaryDirectory(prefix="epimem-query-") as scratch:
        service = Epimem.from_settings(data_dir=args.data_dir or Path(scratch), background=False)
        store = service.memory.store
        embedder = service.embedder
        # The floor is the same client's raw query, run inside the store's gate: embedded Chroma may be
        # restarted between calls (EPIMEM_CHROMA_RECYCLE_AFTER), and handles are per engine.
        connection = store.connection
        started = time.perf_counter()
        if store.vectors.count(GROUP) != sessions * args.episodes:
            build(store, sessions, args.episodes)
        with connection.call() as client:
            everything = client.get_collection(index_name(GROUP)).get(include=["embeddings", "documents", "metadatas"])
            flat = client.get_or_create_collection(
                "bench-flat", metadata={"hnsw:space": "cosine"}, embedding_function=None
            )
            for offset in range(flat.count(), len(everything["ids"]), 5000):
                part = slice(offset, offset + 5000)
                flat.add(
                    ids=everything["ids"][part],
                    embeddings=np.asarray(everything["embeddings"][part]),
                    documents=everything["documents"][part],
                    metadatas=everything["metadatas"][part],
                )
            vectors = flat.count()
        c.heading(f"query: {sessions} sessions x {args.episodes} episodes ({vectors} vectors), {queries} queries")
        c.line("setup (s)", seconds=time.perf_counter() - started)

        texts = query_texts(queries * 4)
        rng = random.Random(5)
        chosen = [rng.randrange(sessions) for _ in range(queries)]
        service.search(GROUP, "warm-up", k=10)  # the group's keyword index is built once, then cached
        floor = RawFloor(store, embedder)
        floor.query("bench-flat", "warm-up", keep=True)

        times = c.interleaved(
            {
                "session facade": lambda i: service.search(GROUP, texts[i], k=10, session_ids=[session_id(chosen[i])]),
                "session raw": lambda i: floor.query(partition_name(GROUP, session_id(chosen[i])), texts[queries + i]),
                "group facade": lambda i: service.search(GROUP, texts[2 * queries + i], k=10),
                "group raw (one collection)": lambda i: floor.query("bench-flat", texts[3 * queries + i], keep=True),
            },
            queries,
        )
        figures = {name: c.summary(values) for name, values in times.items()}
        for name, values in figures.items():
            c.line(f"{name} (ms)", **values)
        session_ratio = figures["session facade"]["p50"] / figures["session raw"]["p50"]
        group_ratio = figures["group facade"]["p95"] / figures["group raw (one collection)"]["p95"]
        c.line("ratio session p50 facade/raw", ratio=session_ratio, target=1.5)
        c.line("ratio group p95 facade/raw", ratio=group_ratio, target=3.0)
        c.line(
            "ratio group p50 facade/raw",
            ratio=figures["group facade"]["p50"] / figures["group raw (one collection)"]["p50"],
        )

        # The embedding cache: the same query again is served from the LRU, a new one is encoded.
        cache = c.interleaved(
            {
                "query embedding miss": lambda i: embedder.embed_query(f"a question never asked before {i}"),
                "query embedding hit": lambda i: embedder.embed_query(texts[0]),
                "group search repeated query": lambda i: service.search(GROUP, texts[2 * queries], k=10),
            },
            queries,
        )
        for name, values in cache.items():
            c.line(f"{name} (ms)", **c.summary(values))
        service.close()


if __name__ == "__main__":
    main()
