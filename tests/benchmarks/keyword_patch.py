"""The keyword index of a big group under writes: patched postings vs bm25s rebuilt, at N records.

Texts are LoCoMo turns (speaker + text), repeated with a counter to reach N records. Printed, each
measured in this run: building the index from scratch (bm25s as the read path used it before issue 31,
and the postings of retrieval.bm25 from the same texts), patching the postings after a 2-record add
(what a chat-app write costs the read path now), after a delete of 2 records, and scoring one query
(postings vs bm25s's precomputed matrix). The two indexes' scores are checked equal.

    python tests/benchmarks/keyword_patch.py                 # 60,000 records
    python tests/benchmarks/keyword_patch.py --records 200000
    python tests/benchmarks/keyword_patch.py --quick         # 5,000 records (CI short form)
"""

from __future__ import annotations

import argparse
import json
import time

import _common as c
import numpy as np

from retrieval.bm25 import Postings, tokenize

QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint recently?",
    "Where did the family go camping?",
    "What instrument does Melanie play?",
]


def texts(count: int) -> list[str]:
    turns: list[str] = []
    for sample in json.loads(c.LOCOMO.read_text()):
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns += [f"{turn.get('speaker', '')} {turn.get('text', '')}" for turn in value]
    return [f"{turns[i % len(turns)]} (turn {i})" for i in range(count)]


def timed(function: object, *args: object) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args)  # type: ignore[operator]
    return (time.perf_counter() - started) * 1000, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--quick", action="store_true", help="5,000 records")
    args = parser.parse_args()
    count = 5_000 if args.quick else args.records
    corpus = texts(count)
    import bm25s

    c.heading(f"keyword index at {count:,} records: patched postings vs bm25s rebuilt")
    tokenize(corpus[:100])  # imports and the stemmer loaded before anything is timed
    tokenize_ms, tokens = timed(tokenize, corpus)
    reference = bm25s.BM25()
    matrix_ms, _ = timed(lambda: reference.index(tokens, show_progress=False))
    c.line("bm25s rebuild (ms)", tokenize=tokenize_ms, matrix=matrix_ms, total=tokenize_ms + matrix_ms)
    build_ms, postings = timed(Postings.of, corpus)
    c.line("postings build (ms)", total=build_ms, mb=postings.nbytes / 2**20)

    added = ["Caroline: I went to the support group again today.", "Melanie: camping next weekend!"]
    old_of_new = np.concatenate([np.arange(count), [-1, -1]])
    positions = np.asarray([count, count + 1])
    patch_ms, grown = timed(lambda: postings.renumbered(old_of_new, count + 2).with_texts(positions, added))
    kept = np.concatenate([np.arange(1, count // 2), np.arange(count // 2 + 1, count)])
    delete_ms, _ = timed(lambda: postings.renumbered(kept, len(kept)).compacted())
    c.line("postings patch (ms)", add_2=patch_ms, delete_2=delete_ms)

    ours, theirs = [], []
    for query in QUERIES * 5:
        query_tokens = tokenize([query])[0]
        ms, found = timed(lambda q=query_tokens: postings.scores(q, k1=1.5, b=0.75))
        ours.append(ms / 1000)
        ms, expected = timed(lambda q=query_tokens: np.asarray(reference.get_scores(q), dtype=np.float32))
        theirs.append(ms / 1000)
        assert np.array_equal(found, expected), query
    c.line("query scoring postings (ms)", **c.summary(ours))
    c.line("query scoring bm25s matrix (ms)", **c.summary(theirs))
    c.line("ratio rebuild / add patch", ratio=(tokenize_ms + matrix_ms) / patch_ms)
    assert len(grown.lengths) == count + 2


if __name__ == "__main__":
    main()
