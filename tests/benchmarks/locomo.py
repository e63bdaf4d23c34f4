"""LoCoMo evidence recall: epimem's context builder and search against three single-turn baselines.

    .venv/bin/python tests/benchmarks/locomo.py [--data PATH] [--samples conv-26,conv-30] [--budgets 500,1000,2000]

Each LoCoMo conversation becomes one group (one session per LoCoMo session, message id = dia_id),
ingested through the real pipeline with the offline episode generator. For every question the
context builder is called at each budget; evidence recall is the share of the question's evidence
dia_ids among the context's citations. Session recall@k comes from search: the share of the
evidence sessions among the first k distinct sessions of the hits.

The baselines follow ../shared/data/README.md exactly: each turn rendered as
"[session date] Speaker: text" (+ " [shares caption]"), cost ceil(characters / 4), turns added in
rank order while they fit; BM25 is Okapi (k1 1.5, b 0.75, rank_bm25's idf floor) over lowercase
\\w+ tokens of the rendered turn, MiniLM is cosine over the rendered turn, RRF fuses both (k = 60).

Importable (notebooks): load_samples, baseline_recall, service_recall, recall_table, main.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a file: make the repository importable
    sys.path.insert(0, str(ROOT))

from memory.ingest.importers import LocomoSample, read_locomo  # noqa: E402
from tests.benchmarks._common import LOCOMO  # noqa: E402  (sets the offline environment first)

BUDGETS = (500, 1000, 2000)
SESSION_KS = (1, 3, 5)
BASELINES = ("bm25", "minilm", "rrf")
BASELINE_NAMES = {
    "bm25": "BM25 (single turns)",
    "minilm": "all-MiniLM-L6-v2 cosine (single turns)",
    "rrf": "RRF of both, k=60 (single turns)",
}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    rendered: str  # the baseline's rendering: "[session date] Speaker: text [shares caption]"


@dataclass
class Sample:
    """One LoCoMo conversation: the parsed sample (for ingestion) and its turns as the baselines see them."""

    locomo: LocomoSample
    turns: list[Turn]

    @property
    def sample_id(self) -> str:
        return self.locomo.sample_id


@dataclass
class Scores:
    """Per-question figures, grouped by category: scores[category][key] = list of values."""

    values: dict[int, dict[Any, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))

    def add(self, category: int, key: Any, value: float) -> None:
        self.values[category][key].append(value)

    def mean(self, key: Any, categories: Iterable[int] = (1, 2, 3, 4)) -> float:
        found = [v for c in categories for v in self.values.get(c, {}).get(key, [])]
        return statistics.fmean(found) if found else float("nan")

    def count(self, key: Any, categories: Iterable[int] = (1, 2, 3, 4)) -> int:
        return sum(len(self.values.get(c, {}).get(key, [])) for c in categories)


def load_samples(path: str | Path = LOCOMO, sample_ids: Sequence[str] | None = None) -> list[Sample]:
    raw = {str(item["sample_id"]): item for item in json.loads(Path(path).read_text(encoding="utf-8"))}
    samples = []
    for parsed in read_locomo(path):
        if sample_ids and parsed.sample_id not in sample_ids:
            continue
        conversation = raw[parsed.sample_id]["conversation"]
        numbers = sorted(
            int(key.split("_")[1]) for key, value in conversation.items() if re.fullmatch(r"session_\d+", key) and value
        )
        turns = []
        for number in numbers:
            date = conversation[f"session_{number}_date_time"]
            for turn in conversation[f"session_{number}"]:
                caption = f" [shares {turn['blip_caption']}]" if turn.get("blip_caption") else ""
                turns.append(Turn(str(turn["dia_id"]), f"[{date}] {turn['speaker']}: {turn['text']}{caption}"))
        samples.append(Sample(parsed, turns))
    return samples


def questions(sample: Sample) -> Iterable[tuple[int, str, tuple[str, ...]]]:
    """(category, question, evidence) for every question with readable evidence."""
    for question in sample.locomo.questions:
        if question.evidence:
            yield question.category, question.question, question.evidence


def evidence_recall(evidence: Sequence[str], found: set[str]) -> float:
    return sum(dia_id in found for dia_id in evidence) / len(evidence)


# -- baselines -------------------------------------------------------------------------------------


def okapi_scores(documents: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """BM25 Okapi as rank_bm25 computes it (negative idf floored at 0.25 x mean idf)."""
    average = sum(map(len, documents)) / len(documents)
    frequency = Counter(word for document in documents for word in set(document))
    idf = {w: math.log(len(documents) - n + 0.5) - math.log(n + 0.5) for w, n in frequency.items()}
    floor = 0.25 * sum(idf.values()) / len(idf)
    idf = {w: v if v >= 0 else floor for w, v in idf.items()}
    lengths = np.array([len(d) for d in documents], dtype=float)
    counts = [Counter(d) for d in documents]
    scores = np.zeros(len(documents))
    for word in query:
        if word in idf:
            tf = np.array([c.get(word, 0) for c in counts], dtype=float)
            scores += idf[word] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / average))
    return scores


def fill_budget(turns: list[Turn], ranking: Iterable[int], budget: int) -> set[str]:
    used, found = 0, set()
    for index in ranking:
        cost = math.ceil(len(turns[index].rendered) / 4)
        if used + cost <= budget:
            used += cost
            found.add(turns[index].dia_id)
    return found


def single_turn_ranking(
    method: str, tokens: list[list[str]], vectors: np.ndarray | None, question: str, embedder: Any
) -> np.ndarray:
    """The turns' order for a question under a single-turn baseline: BM25, cosine, or both fused (RRF, k 60)."""
    rankings = []
    if method in ("bm25", "rrf"):
        bm25 = okapi_scores(tokens, _WORD.findall(question.lower()))
        rankings.append(np.argsort(-bm25, kind="stable"))
    if vectors is not None:
        cosine = vectors @ embedder.embed_batch([question])[0]
        rankings.append(np.argsort(-cosine, kind="stable"))
    if len(rankings) == 1:
        return rankings[0]
    fused = np.zeros(len(tokens))
    for order in rankings:
        fused[order] += 1.0 / (60 + np.arange(len(order)) + 1)
    return np.argsort(-fused, kind="stable")


def turn_words(turns: list[Turn]) -> list[list[str]]:
    return [_WORD.findall(turn.rendered.lower()) for turn in turns]


_TURN_VECTORS: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}


def turn_vectors(embedder: Any, texts: list[str]) -> np.ndarray:
    """The turns' vectors, embedded once per process: the dense baselines of every mode and every circle of
    friends rank the same turns (the same texts in one call give the same vectors, so reuse changes nothing)."""
    key = (str(embedder.model_id), tuple(texts))
    if key not in _TURN_VECTORS:
        _TURN_VECTORS[key] = embedder.embed_batch(texts)
    return _TURN_VECTORS[key]


def baseline_recall(
    samples: list[Sample], method: str, budgets: Sequence[int] = BUDGETS, *, embedder: Any = None
) -> Scores:
    """Evidence recall of one single-turn baseline ("bm25", "minilm" or "rrf")."""
    if method not in BASELINES:
        raise ValueError(f"method must be one of {BASELINES}")
    if method != "bm25" and embedder is None:
        from memory.embedding.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    scores = Scores()
    for sample in samples:
        texts = [turn.rendered for turn in sample.turns]
        tokens = [_WORD.findall(text.lower()) for text in texts]
        vectors = turn_vectors(embedder, texts) if method != "bm25" else None
        for category, question, evidence in questions(sample):
            ranking = single_turn_ranking(method, tokens, vectors, question, embedder)
            for budget in budgets:
                scores.add(category, budget, evidence_recall(evidence, fill_budget(sample.turns, ranking, budget)))
    return scores


# -- epimem ------------------------------------------------------------------------------------------


def ingest(service: Any, samples: list[Sample]) -> None:
    """Each conversation as one group, through the real pipeline (skipped if the group has vectors)."""
    for sample in samples:
        if service.vector_count(sample.sample_id) == 0:
            service.ingest_locomo(sample.locomo, group_id=sample.sample_id)


def service_recall(
    service: Any, samples: list[Sample], budgets: Sequence[int] = BUDGETS, *, session_ks: Sequence[int] = SESSION_KS
) -> Scores:
    """Evidence recall of ``service.context`` at each budget (key: budget) and session recall@k of
    ``service.search`` (key: ("session", k)); ingests what is not ingested yet."""
    ingest(service, samples)
    scores = Scores()
    for sample in samples:
        group = sample.sample_id
        for category, question, evidence in questions(sample):
            for budget in budgets:
                result = service.context(group, question, token_budget=budget)
                cited = {message_id for citation in result.citations for message_id in citation.message_ids}
                scores.add(category, budget, evidence_recall(evidence, cited))
            hits = service.search(group, question, k=max(session_ks) * 4)
            ranked_sessions = list(dict.fromkeys(hit.episode.session_id for hit in hits))
            wanted = {f"session_{dia_id[1:].split(':')[0]}" for dia_id in evidence}
            for k in session_ks:
                scores.add(category, ("session", k), len(wanted & set(ranked_sessions[:k])) / len(wanted))
    return scores


# -- output ---------------------------------------------------------------------------------------------


def recall_table(results: dict[str, Scores], budgets: Sequence[int] = BUDGETS) -> str:
    """Markdown: evidence recall per retriever and budget, categories 1-4, per category and category 5."""
    header = "| retriever | " + " | ".join(f"{b:,} tokens" for b in budgets) + " |"
    lines = ["Evidence recall, categories 1-4:", "", header, "|---|" + "---|" * len(budgets)]
    for name, scores in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{scores.mean(b):.3f}" for b in budgets) + " |")
    lines += ["", "Per category (500 / 1,000 / 2,000 tokens; category 5 is not in the overall figure):", ""]
    columns = [f"{c} {CATEGORIES[c]}" for c in CATEGORIES]
    lines += ["| retriever | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name, scores in results.items():
        cells = [" / ".join(f"{scores.mean(b, [c]):.2f}" for b in budgets) for c in CATEGORIES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    counts = next(iter(results.values()))
    lines += ["", "Questions: " + ", ".join(f"{c}: {counts.count(budgets[0], [c])}" for c in CATEGORIES)]
    return "\n".join(lines)


def session_table(scores: Scores, ks: Sequence[int] = SESSION_KS) -> str:
    lines = ["Session recall@k from search (epimem):", ""]
    lines += ["| categories | " + " | ".join(f"@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    groups = [("1-4", [1, 2, 3, 4])] + [(f"{c} {CATEGORIES[c]}", [c]) for c in CATEGORIES]
    for label, categories in groups:
        lines.append(f"| {label} | " + " | ".join(f"{scores.mean(('session', k), categories):.3f}" for k in ks) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Scores]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(LOCOMO), help="LoCoMo file (default: EPIMEM_BENCHMARK_DATA)")
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default: all)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--data-dir", default=None, help="epimem data folder (default: a temporary one)")
    parser.add_argument("--no-baselines", action="store_true")
    args = parser.parse_args(argv)

    from api.facade import Epimem

    budgets = [int(b) for b in args.budgets.split(",")]
    samples = load_samples(args.data, [s for s in args.samples.split(",") if s] or None)
    with tempfile.TemporaryDirectory(prefix="epimem-locomo-") as scratch:
        service = Epimem.from_settings(data_dir=args.data_dir or scratch, background=False)
        try:
            started = time.perf_counter()
            ingest(service, samples)
            ingested = time.perf_counter() - started
            started = time.perf_counter()
            results = {"epimem context": service_recall(service, samples, budgets)}
            answered = time.perf_counter() - started
            if not args.no_baselines:
                for method in BASELINES:
                    results[BASELINE_NAMES[method]] = baseline_recall(
                        samples, method, budgets, embedder=service.embedder
                    )
        finally:
            service.close()
    questions_run = sum(1 for s in samples for _ in questions(s))
    print(f"LoCoMo: {', '.join(s.sample_id for s in samples)} ({questions_run} questions)")
    print(
        f"ingest {ingested:.1f} s; {questions_run} questions x ({len(budgets)} contexts + 1 search) {answered:.1f} s\n"
    )
    print(recall_table(results, budgets))
    print()
    print(session_table(results["epimem context"]))
    return results


if __name__ == "__main__":
    main()
