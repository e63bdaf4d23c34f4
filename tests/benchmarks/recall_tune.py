"""Tuning the context and search weights by leave-one-conversation-out over the nine dev conversations.

    .venv/bin/python tests/benchmarks/recall_tune.py --data-dir DIR [--variants NAME,...] [--search-only]

Reads an ingested data folder (tests/benchmarks/recall.py --data-dir DIR ingests it) and scores
every variant of ScoringPolicy in VARIANTS on every question of LoCoMo dev and REALTALK dev, with a
memoised Searcher (what a variant does not change is computed once): about a minute per variant
once warm. SEARCH_VARIANTS are scored the same way for search (episode recall@k).

Leave-one-out: for each conversation, the variant with the best objective on the other eight
(mean evidence recall over the three budgets, each dataset weighing half) is applied to it; the
held-out figures of the nine conversations make the leave-one-out recall. A variant is worth
taking only if it raises that figure.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from recall import (  # noqa: E402
    BUDGETS,
    CATEGORIES,
    EPISODE_KS,
    Sample,
    Scores,
    context_recall,
    episode_recall,
    load_dataset,
    merge,
    table,
)

from retrieval.context import ContextBuilder, PackingPolicy  # noqa: E402
from retrieval.scoring import ScoringPolicy  # noqa: E402
from retrieval.search import SEARCH_POLICY, Searcher  # noqa: E402
from retrieval.types import SearchQuery  # noqa: E402

BASE = PackingPolicy()
# The message scoring's weights before the second round of tuning (issue 20), names kept in the matched text.
ROUND_1: dict[str, Any] = {"strip_names": False, "keyword_weight": 0.5, "neighbour_share": 0.4, "speaker_bonus": 0.4}
# The context before it: also messages of the best-ranked episodes only, a header per piece.
BEFORE = replace(BASE, select="episodes", day_headers=False, **ROUND_1)
# name -> policy. The default first; each other one changes one thing.
VARIANTS: dict[str, PackingPolicy] = {
    "default": BASE,
    "before (round 1)": BEFORE,
    "best-ranked episodes only": replace(BASE, select="episodes"),
    "names kept in the matched text": replace(BASE, strip_names=False),
    "a header per piece": replace(BASE, day_headers=False),
    "speaker 0.4": replace(BASE, speaker_bonus=0.4),
    "speaker 0.8": replace(BASE, speaker_bonus=0.8),
    "keyword 0.2": replace(BASE, keyword_weight=0.2),
    "keyword 0.5": replace(BASE, keyword_weight=0.5),
    "neighbour 0.1": replace(BASE, neighbour_share=0.1),
    "neighbour 0.4": replace(BASE, neighbour_share=0.4),
    "episode 0.6": replace(BASE, episode_share=0.6),
    "when 0.2": replace(BASE, when_bonus=0.2),
    "question 0.2": replace(BASE, question_penalty=0.2),
    "episodes 80": replace(BASE, max_episodes=80),
}
SEARCH_BASE = SEARCH_POLICY
SEARCH_VARIANTS: dict[str, ScoringPolicy] = {
    "fused only (before issue 20)": replace(SEARCH_BASE, search_evidence=0.0),
    "evidence 1.0, round-1 scoring": replace(SEARCH_BASE, max_episodes=40, search_evidence=1.0, **ROUND_1),
    "evidence 1.0, 40 best-ranked episodes": replace(SEARCH_BASE, max_episodes=40, search_evidence=1.0),
    "evidence 2.0, 40 best-ranked episodes": replace(SEARCH_BASE, max_episodes=40),
    "evidence 0.1, every candidate episode": replace(SEARCH_BASE, search_evidence=0.1),
    "evidence 1.0, every candidate episode": replace(SEARCH_BASE, search_evidence=1.0),
    "default (evidence 2.0, every candidate episode)": SEARCH_BASE,
    "evidence 2.0, whole-group scoring": replace(SEARCH_BASE, select="group", max_episodes=40),
}


class MemoSearcher(Searcher):
    """A Searcher whose reads and per-query computations are kept: variants of the weights reuse them."""

    def __init__(self, service: Any) -> None:
        store = service.memory.store
        super().__init__(vectors=store.vectors, log=store.log, embedder=service.embedder)
        self._memo: dict[tuple[Any, ...], Any] = {}

    def _kept(self, key: tuple[Any, ...], compute: Any) -> Any:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def embed_query(self, query: str) -> Any:
        return self._kept(("embed", query), lambda: super(MemoSearcher, self).embed_query(query))

    def candidates(self, group_id: str, scope: Any, analysis: Any, *, depth: int) -> Any:
        return self._kept(
            ("candidates", group_id, analysis.text, depth),
            lambda: super(MemoSearcher, self).candidates(group_id, scope, analysis, depth=depth),
        )

    def load_episodes(self, group_id: str, episode_ids: list[str]) -> Any:
        return self._kept(
            ("episodes", group_id, tuple(episode_ids)),
            lambda: super(MemoSearcher, self).load_episodes(group_id, episode_ids),
        )

    def load_episodes_with_vectors(self, group_id: str, episode_ids: list[str]) -> Any:
        key = ("episodes+vectors", group_id, tuple(episode_ids))
        return self._kept(key, lambda: super(MemoSearcher, self).load_episodes_with_vectors(group_id, episode_ids))

    def messages_of(self, group_id: str, episodes: list[Any]) -> Any:
        key = ("messages", group_id, tuple(e.uuid for e in episodes))
        return self._kept(key, lambda: super(MemoSearcher, self).messages_of(group_id, episodes))

    def episode_rows(self, group_id: str, episode_ids: list[str], loaded: Any = None) -> Any:
        key = ("rows", group_id, tuple(episode_ids))  # ``loaded`` only saves reads: the rows are the same
        return self._kept(key, lambda: super(MemoSearcher, self).episode_rows(group_id, episode_ids, loaded))

    def keyword_scores(self, group_id: str, query: str) -> Any:
        return self._kept(("bm25", group_id, query), lambda: super(MemoSearcher, self).keyword_scores(group_id, query))

    def speaker_names(self, group_id: str) -> Any:
        return self._kept(("names", group_id), lambda: super(MemoSearcher, self).speaker_names(group_id))


def evaluate(
    services: dict[str, Any], datasets: dict[str, list[Sample]], policy: PackingPolicy, memos: dict[str, MemoSearcher]
) -> dict[str, Scores]:
    """conversation -> Scores (context recall at each budget) under one policy."""
    found: dict[str, Scores] = {}
    for dataset, samples in datasets.items():
        wordpieces = shared_counter(services[dataset])
        builder = ContextBuilder(searcher=memos[dataset], count_wordpieces=wordpieces, policy=policy)
        found.update(
            context_recall(
                lambda group, question, budget, builder=builder: builder.build(group, service_query(question, budget)),
                samples,
            )
        )
    return found


_COUNTERS: dict[int, Any] = {}


def shared_counter(service: Any) -> Any:
    """The service's wordpiece counter, memoised across variants (each builder would count every line
    and every context text again: most of a variant's time)."""
    if service.settings.context_token_count != "wordpieces":
        return None
    counter = service.embedder.count_tokens
    if id(service) not in _COUNTERS:
        _COUNTERS[id(service)] = functools.lru_cache(maxsize=None)(counter)
    return _COUNTERS[id(service)]


def service_query(question: str, budget: int) -> Any:
    from retrieval.types import ContextQuery

    return ContextQuery(query=question, token_budget=budget)


def objective(per_conversation: dict[str, Scores], conversations: dict[str, str], keep: set[str]) -> float:
    """Mean recall over the budgets, each dataset weighing half, over the kept conversations."""
    figures = []
    for dataset in set(conversations.values()):
        kept = {c: s for c, s in per_conversation.items() if c in keep and conversations[c] == dataset}
        if kept:
            merged = merge(kept)
            figures.append(statistics.fmean(merged.mean(b, CATEGORIES[dataset]) for b in BUDGETS))
    return statistics.fmean(figures)


def leave_one_out(results: dict[str, dict[str, Scores]], conversations: dict[str, str]) -> tuple[dict, dict]:
    """(conversation -> held-out Scores of the variant chosen on the others, conversation -> that variant)."""
    held: dict[str, Scores] = {}
    chosen: dict[str, str] = {}
    for conversation in conversations:
        others = set(conversations) - {conversation}
        best = max(results, key=lambda name: (objective(results[name], conversations, others), name == "default"))
        held[conversation], chosen[conversation] = results[best][conversation], best
    return held, chosen


def run(services: dict[str, Any], datasets: dict[str, list[Sample]], variants: dict[str, PackingPolicy]) -> dict:
    memos = {dataset: MemoSearcher(service) for dataset, service in services.items()}
    conversations = {s.sample_id: name for name, samples in datasets.items() for s in samples}
    results = {}
    for name, policy in variants.items():
        started = time.perf_counter()
        results[name] = evaluate(services, datasets, policy, memos)
        score = objective(results[name], conversations, set(conversations))
        print(f"variant {name:<24} objective {score:.4f}  ({time.perf_counter() - started:.0f} s)", flush=True)
    held, chosen = leave_one_out(results, conversations)
    return {"results": results, "held": held, "chosen": chosen, "conversations": conversations, "memos": memos}


def print_loo(
    services: dict[str, Any], datasets: dict[str, list[Sample]], variants: dict[str, PackingPolicy] | None = None
) -> dict[str, Any]:
    outcome = run(services, datasets, variants or VARIANTS)
    print("\n## leave-one-conversation-out (context weights)")
    print("chosen per held-out conversation: " + ", ".join(f"{c}: {v}" for c, v in outcome["chosen"].items()))
    for dataset, samples in datasets.items():
        ids = {s.sample_id for s in samples}
        rows = {
            "in-sample (default)": merge({c: s for c, s in outcome["results"]["default"].items() if c in ids}),
            "leave-one-out": merge({c: s for c, s in outcome["held"].items() if c in ids}),
        }
        print(f"\n### {dataset}\n")
        print(table(rows, CATEGORIES[dataset]))
    search_table(datasets, outcome["memos"])
    return outcome


def search_table(datasets: dict[str, list[Sample]], memos: dict[str, MemoSearcher]) -> None:
    """Episode recall@k of search with message evidence at several weights (0 = fused rank only, the
    search before), and the weight chosen by leave-one-conversation-out (objective: mean of @1..@10)."""
    conversations = {s.sample_id: name for name, samples in datasets.items() for s in samples}
    found: dict[str, dict[str, Scores]] = {}
    for name, policy in SEARCH_VARIANTS.items():
        found[name] = {}
        for dataset, samples in datasets.items():
            memo = memos[dataset]
            memo.policy = policy
            search = memo.search
            found[name].update(episode_recall(lambda g, q, k, s=search: s(g, SearchQuery(query=q, k=k)), samples))

    def mean_at(scores: dict[str, Scores], keep: set[str]) -> float:
        figures = []
        for dataset in set(conversations.values()):
            kept = merge({c: s for c, s in scores.items() if c in keep and conversations[c] == dataset})
            figures.append(statistics.fmean(kept.mean(("episode", k), CATEGORIES[dataset]) for k in EPISODE_KS))
        return statistics.fmean(figures)

    held: dict[str, Scores] = {}
    for conversation in conversations:
        others = set(conversations) - {conversation}
        best = max(found, key=lambda name: (mean_at(found[name], others), name.startswith("default")))
        held[conversation] = found[best][conversation]
        print(f"search weight chosen without {conversation}: {best}")
    for dataset, samples in datasets.items():
        ids = {s.sample_id for s in samples}
        print(f"\n### search, {dataset}: episode recall@" + "/".join(map(str, EPISODE_KS)) + "\n")
        rows = {name: {c: s for c, s in scores.items() if c in ids} for name, scores in found.items()}
        rows["leave-one-out"] = {c: s for c, s in held.items() if c in ids}
        for name, scores in rows.items():
            merged = merge(scores)
            figures = " / ".join(f"{merged.mean(('episode', k), CATEGORIES[dataset]):.3f}" for k in EPISODE_KS)
            print(f"| {name} | {figures} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--realtalk-data-dir", default=None, help="REALTALK's ingested folder, if not --data-dir")
    parser.add_argument("--variants", default="", help="comma-separated names of VARIANTS (default: all)")
    parser.add_argument("--datasets", default="locomo,realtalk")
    parser.add_argument("--quick", action="store_true", help="the short datasets of recall.py --quick")
    parser.add_argument("--search-only", action="store_true", help="only the search table (SEARCH_VARIANTS)")
    args = parser.parse_args(argv)

    from api.facade import Epimem

    names = [n for n in args.variants.split(",") if n] or list(VARIANTS)
    datasets = {name: load_dataset(name, quick=args.quick) for name in args.datasets.split(",") if name}
    folders = {
        name: args.realtalk_data_dir if name == "realtalk" and args.realtalk_data_dir else args.data_dir
        for name in datasets
    }
    opened = {folder: Epimem.from_settings(data_dir=folder, background=False) for folder in set(folders.values())}
    try:
        services = {name: opened[folder] for name, folder in folders.items()}
        if args.search_only:
            search_table(datasets, {dataset: MemoSearcher(service) for dataset, service in services.items()})
            return
        print_loo(services, datasets, {n: VARIANTS[n] for n in ["default", *names] if n in VARIANTS})
    finally:
        for service in opened.values():
            service.close()


if __name__ == "__main__":
    main()
