"""Ingest vs the embedding floor: LoCoMo through the facade (offline generator) vs model.encode alone.

The embedder is wrapped to record every text the pipeline embeds; the same texts are then
encoded by the model directly, once in the pipeline's own batches and once as a single call
(the floor). Target: ingest time <= 1.3 x encode-only.

    python tests/benchmarks/ingest.py             # full: every sample of locomo-dev.json
    python tests/benchmarks/ingest.py --quick     # short form: 2 sessions of one sample
    python tests/benchmarks/ingest.py --profile   # also print a pyinstrument profile of the ingest
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _common as c
import numpy as np

from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.ingest.importers import LocomoSample, read_locomo


class Recording:
    """Wraps an embedder's embed_batch and keeps every batch of texts it was given."""

    def __init__(self, embedder: SentenceTransformerEmbedder) -> None:
        self.batches: list[list[str]] = []
        self.seconds = 0.0
        self._inner = embedder.embed_batch
        embedder.embed_batch = self  # type: ignore[method-assign]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        vectors = self._inner(texts)
        self.seconds += time.perf_counter() - started
        if len(texts):
            self.batches.append(list(texts))
        return vectors

    @property
    def texts(self) -> list[str]:
        return [text for batch in self.batches for text in batch]


def encode(embedder: SentenceTransformerEmbedder, batches: list[list[str]], batch_size: int) -> float:
    model = embedder._model  # noqa: SLF001 - the floor is the bare model
    started = time.perf_counter()
    for batch in batches:
        model.encode(batch, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    return time.perf_counter() - started


def load(quick: bool) -> list[LocomoSample]:
    samples = read_locomo(c.LOCOMO)
    if not quick:
        return samples
    sample = samples[0]
    sample.sessions = dict(list(sample.sessions.items())[:2])
    return [sample]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form (2 sessions of one sample)")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--profile", action="store_true", help="pyinstrument profile of the ingest")
    args = parser.parse_args()

    from api.facade import Epimem

    samples = load(args.quick)
    messages = sum(len(sample.messages) for sample in samples)
    embedder = SentenceTransformerEmbedder()
    embedder.embed_batch(["warm-up"] * 8)
    recording = Recording(embedder)
    with tempfile.TemporaryDirectory(prefix="epimem-ingest-") as scratch:
        service = Epimem.from_settings(data_dir=Path(scratch), background=False, embedder=embedder)
        profiler = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler()
            profiler.start()
        started = time.perf_counter()
        episodes = sum(len(service.ingest_locomo(sample)) for sample in samples)
        ingest_s = time.perf_counter() - started
        if profiler is not None:
            profiler.stop()
        stages = dict(service.stats().ingest.seconds)
        service.close()

    texts = recording.texts
    batch_size = service.settings.embedding_batch_size
    # The floor twice and the pipeline's own batches once, alternating, after the ingest.
    floor_runs = [encode(embedder, [texts], batch_size)]
    same_batches_s = encode(embedder, recording.batches, batch_size)
    floor_runs.append(encode(embedder, [texts], batch_size))
    floor_s = float(np.mean(floor_runs))
    repeated = sum(count - 1 for count in collections.Counter(texts).values() if count > 1)

    c.heading(f"ingest: {len(samples)} LoCoMo samples, {messages} messages -> {episodes} episodes")
    c.line("ingest (s)", total=ingest_s, messages_per_s=messages / ingest_s)
    c.line("texts embedded", texts=len(texts), batches=len(recording.batches), repeated=repeated)
    c.line(
        "encode-only (s)",
        one_call=floor_s,
        runs=" ".join(f"{run:.3g}" for run in floor_runs),
        pipeline_batches=same_batches_s,
        inside_ingest=recording.seconds,
    )
    c.line("ratio ingest / encode-only", ratio=ingest_s / floor_s, target=1.3)
    c.line("stages (s)", **{name: round(value, 2) for name, value in sorted(stages.items())})
    if profiler is not None:
        print(profiler.output_text(unicode=False, color=False, show_all=False))


if __name__ == "__main__":
    main()
