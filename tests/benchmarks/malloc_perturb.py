"""What glibc's M_PERTURB (set by embedded stores, memory.engine.allocator.fill_fresh_memory) costs the
embedding: the same batches embedded in a process without it and in one with it, alternating.

    .venv/bin/python tests/benchmarks/malloc_perturb.py            # 2 pairs of processes
    .venv/bin/python tests/benchmarks/malloc_perturb.py --pairs 4
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TEXTS = [f"Caroline: message number {i} about hiking at the lake with Rex and the pottery class." for i in range(256)]


def one_process(perturb: bool) -> float:
    """Median seconds of embedding 256 messages and then 2 (an add), six times, in this process."""
    from memory.embedding.embedder import SentenceTransformerEmbedder
    from memory.engine.allocator import fill_fresh_memory

    embedder = SentenceTransformerEmbedder()
    embedder.embed_batch(TEXTS[:8])
    if perturb:
        fill_fresh_memory()
    times = []
    for _ in range(6):
        started = time.perf_counter()
        embedder.embed_batch(TEXTS)
        embedder.embed_batch(TEXTS[:2])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--child", choices=["plain", "perturb"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(one_process(args.child == "perturb"))
        return
    found: dict[str, list[float]] = {"plain": [], "perturb": []}
    for _ in range(args.pairs):
        for mode in found:
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode], capture_output=True, text=True, check=True
            )
            found[mode].append(float(out.stdout.strip().splitlines()[-1]))
    for mode, values in found.items():
        print(f"{mode:<8} seconds per round: " + " / ".join(f"{v:.2f}" for v in values))
    ratio = statistics.median(found["perturb"]) / statistics.median(found["plain"])
    print(f"ratio perturb / plain (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
