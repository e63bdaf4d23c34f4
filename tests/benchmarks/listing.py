"""What a listing of a collection's ids costs in pages (memory.store.paging.list_ids, EPIMEM_CHROMA_LISTING_PAGE)
against one call for all of them (what epimem did before it kept Chroma Cloud's quota of 300 results a read).

One embedded collection of ``--records`` small log-like records; the ids of all of them listed, and those of a
filter that selects ~19 in 20 (``kind``), in pages of each size, the sizes alternating, ``--rounds`` times;
medians.

    .venv/bin/python tests/benchmarks/listing.py [--records 60000 --pages 300,3000,100000 --rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (makes the repository importable, offline)
import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings
from partition_floor import stop_client

from memory.store.bounded import BoundedCollection, CollectionSlots


def build(folder: Path, records: int) -> Any:
    client = chromadb.PersistentClient(
        path=str(folder), settings=ChromaSettings(anonymized_telemetry=False, is_persistent=True)
    )
    collection = client.create_collection("listing-cost", embedding_function=None)
    for start in range(0, records, 5000):
        ids = [f"m-{i:07d}" for i in range(start, min(start + 5000, records))]
        metadatas = [{"kind": "session" if i % 20 == 0 else "message", "ts": float(i)} for i in range(len(ids))]
        collection.add(ids=ids, embeddings=np.zeros((len(ids), 1)), metadatas=metadatas)
    return collection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--pages", default="300,3000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 records, one round")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds = 2_000, 1
    sizes = [int(size) for size in args.pages.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        collection = build(Path(folder), args.records)
        figures: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.rounds):
            for size in sizes:
                bounded = BoundedCollection(collection, CollectionSlots(), listing_page=size)
                for name, where in (("all", None), ("filtered", {"kind": "message"})):
                    started = time.perf_counter()
                    found = bounded.list_ids(where)
                    figures.setdefault((name, size), []).append(time.perf_counter() - started)
                    assert len(found) == (args.records if where is None else args.records - args.records // 20)
        stop_client(Path(folder))
    print(f"{args.records} records, {args.rounds} rounds; seconds to list their ids, medians")
    for name in ("all", "filtered"):
        row = ", ".join(f"pages of {size}: {statistics.median(figures[(name, size)]):.2f}" for size in sizes)
        print(f"{name:>8}: {row}")


if __name__ == "__main__":
    main()
