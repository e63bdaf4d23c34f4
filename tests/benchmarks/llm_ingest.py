"""Ingest with an LLM is bounded by the LLM: LoCoMo through the service with the stand-in OpenAI
server (tests/helpers/fake_openai.py) answering every call after a fixed delay, for several
``EPIMEM_LLM_CONCURRENCY`` values N. Bound: LLM calls x delay / N + the embedding floor (the same
texts encoded alone, one call, measured after each run). Target: wall <= 1.2 x bound.

    python tests/benchmarks/llm_ingest.py                          # all of locomo-dev.json, delay 1 s, N = 1, 4, 16
    python tests/benchmarks/llm_ingest.py --delay 0.2 --samples conv-30
    python tests/benchmarks/llm_ingest.py --quick                  # short form: 3 sessions, delay 0.05 s, N = 1, 4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
from ingest import Recording, encode

from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.ingest.importers import LocomoSample, read_locomo

sys.path.insert(0, str(c.ROOT / "tests"))
from helpers.fake_openai import FakeOpenAI, Reply, default_responder  # noqa: E402


def load(quick: bool, samples: str) -> list[LocomoSample]:
    found = read_locomo(c.LOCOMO)
    chosen = [s for s in samples.split(",") if s]
    if chosen:
        found = [sample for sample in found if sample.sample_id in chosen]
    if quick:
        found = found[:1]
        found[0].sessions = dict(list(found[0].sessions.items())[:3])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form (3 sessions, delay 0.05 s, N = 1, 4)")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--delay", type=float, help="seconds the stand-in LLM waits before each answer (default 1)")
    parser.add_argument("--concurrency", help="comma-separated N values (default 1,4,16)")
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default: all)")
    args = parser.parse_args()
    delay = args.delay if args.delay is not None else (0.05 if args.quick else 1.0)
    levels = [int(n) for n in (args.concurrency or ("1,4" if args.quick else "1,4,16")).split(",")]

    from api.facade import Epimem

    samples = load(args.quick, args.samples)
    messages = sum(len(sample.messages) for sample in samples)
    embedder = SentenceTransformerEmbedder()
    embedder.embed_batch(["warm-up"] * 8)

    def slow(request: dict[str, Any]) -> Reply:
        reply = default_responder(request)
        reply.delay = delay
        return reply

    c.heading(
        f"LLM ingest: {len(samples)} LoCoMo samples, {messages} messages, every LLM call answered after {delay} s"
    )
    with FakeOpenAI(slow) as server:
        for level in levels:
            recording = Recording(embedder)
            before = len(server.requests)
            with tempfile.TemporaryDirectory(prefix="epimem-llm-ingest-") as scratch:
                service = Epimem.from_settings(
                    data_dir=Path(scratch),
                    background=False,
                    embedder=embedder,
                    llm_base_url=server.url,
                    llm_api_key="benchmark",
                    llm_concurrency=level,
                )
                started = time.perf_counter()
                episodes = sum(len(service.ingest_locomo(sample)) for sample in samples)
                wall = time.perf_counter() - started
                llm = service.stats().llm
                service.close()
            embedder.embed_batch = recording._inner  # type: ignore[method-assign]  # unwrap
            calls = len(server.requests) - before
            floor = encode(embedder, [recording.texts], service.settings.embedding_batch_size)
            bound = calls * delay / level + floor
            tokens = sum(s.prompt_tokens + s.completion_tokens for s in llm.values())
            c.line(
                f"N={level}",
                calls=calls,
                tokens=tokens,
                episodes=episodes,
                wall_s=wall,
                llm_s=calls * delay / level,
                embed_floor_s=floor,
                ratio=wall / bound,
                target=1.2,
            )
            c.line(
                f"N={level} counters",
                **{f"{name}_calls": stats.calls for name, stats in sorted(llm.items())},
                **{
                    f"{name}_tokens": stats.prompt_tokens + stats.completion_tokens
                    for name, stats in sorted(llm.items())
                },
                max_in_flight=server.max_in_flight,
            )
            server.max_in_flight = 0


if __name__ == "__main__":
    main()
