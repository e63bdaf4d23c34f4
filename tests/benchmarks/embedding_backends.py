"""Model cost options: the bundled model in PyTorch vs onnxruntime (float32 and int8) on this CPU.

Reports texts/s for short chat messages and for paragraphs (ratios against PyTorch, measured in
alternating rounds), one-query latency, the cosine agreement of the vectors with PyTorch's, and
retrieval quality: evidence recall@k of single-turn cosine search over LoCoMo (categories 1-4).
The ONNX files are exported from the local weights into a temporary folder (export time shown).

    python tests/benchmarks/embedding_backends.py            # full: every LoCoMo sample
    python tests/benchmarks/embedding_backends.py --quick    # short form: 3 sessions of one sample, fewer texts
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _common as c
import numpy as np

from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.ingest.importers import read_locomo
from memory.text import message_line

BACKENDS = ("torch", "onnx", "onnx-int8")
RECALL_K = (5, 10, 50)


def evidence_recall(embedder: SentenceTransformerEmbedder, samples: list) -> dict[int, float]:
    """Per question: share of its evidence turns among the top-k turns by cosine; mean over questions."""
    found = dict.fromkeys(RECALL_K, 0.0)
    questions = 0
    for sample in samples:
        turns = sample.messages
        vectors = embedder.embed_batch([message_line(m) for m in turns])
        ids = np.array([m.id for m in turns])
        asked = [q for q in sample.questions if q.category in (1, 2, 3, 4) and q.evidence]
        queries = embedder.embed_batch([q.question for q in asked])
        for question, query in zip(asked, queries, strict=True):
            ranked = ids[np.argsort(-(vectors @ query))]
            evidence = set(question.evidence)
            for k in RECALL_K:
                found[k] += len(evidence & set(ranked[:k])) / len(evidence)
            questions += 1
    return {k: found[k] / max(questions, 1) for k in RECALL_K}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form (3 sessions of one sample, fewer texts)")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    samples = read_locomo(c.LOCOMO)
    if args.quick:  # one sample, its first 3 sessions and the questions they answer
        samples = samples[:1]
        samples[0].sessions = dict(list(samples[0].sessions.items())[:3])
        kept = {m.id for m in samples[0].messages}
        samples[0].questions = [q for q in samples[0].questions if q.evidence and set(q.evidence) <= kept]
    turns = [message_line(m) for sample in samples for m in sample.messages]
    short = turns[: 64 if args.quick else 512]
    paragraphs = [" ".join(turns[i : i + 8]) for i in range(0, len(turns), 8)][: 8 if args.quick else 96]
    rounds = args.rounds or (1 if args.quick else 3)

    with tempfile.TemporaryDirectory(prefix="epimem-onnx-") as scratch:
        embedders: dict[str, SentenceTransformerEmbedder] = {}
        for backend in BACKENDS:
            seconds, embedder = c.timed(
                lambda backend=backend: SentenceTransformerEmbedder(backend=backend, onnx_dir=Path(scratch))
            )
            embedders[backend] = embedder
            c.line(f"load {backend} (s, incl. export)", seconds=seconds, model_id=embedder.model_id)
        for embedder in embedders.values():
            embedder.embed_batch(short[:16])  # warm-up

        c.heading(f"throughput: {len(short)} chat messages, {len(paragraphs)} paragraphs, {rounds} rounds")
        figures: dict[str, dict[str, float]] = {}
        for kind, texts in (("short", short), ("paragraphs", paragraphs)):
            times = c.interleaved(
                {b: (lambda _i, e=embedders[b], t=texts: e.embed_batch(t)) for b in BACKENDS},
                rounds,
            )
            for backend in BACKENDS:
                figures.setdefault(backend, {})[kind] = len(texts) / float(np.median(times[backend]))
        queries = [
            f"what did Caroline say about the {word} {i}"
            for i, word in enumerate(["garden", "art"] * (5 if args.quick else 20))
        ]
        query_times = c.interleaved(
            {b: (lambda i, e=embedders[b]: e.embed_batch([queries[i]])) for b in BACKENDS}, len(queries)
        )
        for backend in BACKENDS:
            speed = figures[backend]
            c.line(
                f"{backend}",
                short_per_s=speed["short"],
                short_x=speed["short"] / figures["torch"]["short"],
                paragraphs_per_s=speed["paragraphs"],
                paragraphs_x=speed["paragraphs"] / figures["torch"]["paragraphs"],
                query_p50_ms=c.summary(query_times[backend])["p50"],
            )

        c.heading("agreement with PyTorch (cosine of the vectors)")
        sample_texts = short[:256] + paragraphs[:32]
        reference = embedders["torch"].embed_batch(sample_texts)
        for backend in BACKENDS[1:]:
            cosine = np.sum(reference * embedders[backend].embed_batch(sample_texts), axis=1)
            c.line(backend, mean=float(cosine.mean()), min=float(cosine.min()))

        c.heading(f"retrieval: evidence recall@k of single-turn cosine, {len(samples)} LoCoMo samples, cat. 1-4")
        for backend in BACKENDS:
            started = time.perf_counter()
            recall = evidence_recall(embedders[backend], samples)
            c.line(
                backend,
                **{f"recall@{k}": round(value, 4) for k, value in recall.items()},
                seconds=time.perf_counter() - started,
            )


if __name__ == "__main__":
    main()
