"""Tuning the context and search weights, held out by circle of friends, on LoCoMo dev and REALTALK dev.

    .venv/bin/python tests/benchmarks/recall_tune.py --data-dir DIR [--variants NAME,...] [--search-only]

Reads an ingested data folder (tests/benchmarks/recall.py --data-dir DIR ingests it; DIR-chat for the
chat-app mode) and scores every variant of ScoringPolicy in VARIANTS on every question of LoCoMo dev
(category 5 included) and REALTALK dev, with memoised reads (what a variant does not change is
computed once). SEARCH_VARIANTS are scored the same way for search (episode recall@k).

Held out (tests/benchmarks/recall_report.py): each LoCoMo conversation is a fold, and each REALTALK
circle of friends (chats 1-4, chats 5-7) is one; each fold is scored with the variant that has the best
objective on the other folds (mean evidence recall over the three budgets and every question, each
dataset weighing half) among those that lower no domain (LoCoMo, each circle) of those other folds.
Printed: held-out beside in-sample and single-turn RRF per dataset and per circle, each variant's
in-sample effect per domain, the targets, recall against chat length, and what the second half of each
chat costs the questions about its first half.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import recall_report  # noqa: E402
from recall import (  # noqa: E402
    BUDGETS,
    CATEGORIES,
    CATEGORY_NAMES,
    EPISODE_KS,
    HEADLINE,
    Sample,
    Scores,
    circles,
    context_recall,
    episode_recall,
    load_dataset,
    merge,
    table,
)

from memory.readmodel.model import ReadModel  # noqa: E402
from memory.readmodel.reader import GroupReader  # noqa: E402
from retrieval.context import ContextBuilder, PackingPolicy  # noqa: E402
from retrieval.message_rows import group_rows  # noqa: E402
from retrieval.policy import ScoringPolicy  # noqa: E402
from retrieval.search import SEARCH_POLICY, Searcher  # noqa: E402
from retrieval.types import SearchQuery  # noqa: E402

BASE = PackingPolicy()
# The message scoring's weights before the second round of tuning (issue 20), names kept in the matched text.
ROUND_1: dict[str, Any] = {"strip_names": False, "keyword_weight": 0.5, "neighbour_share": 0.4, "speaker_bonus": 0.4}
# The context before it: also messages of the best-ranked episodes only.
BEFORE = replace(BASE, select="episodes", **ROUND_1)
# name -> policy. The default first; each other one changes one thing.
VARIANTS: dict[str, PackingPolicy] = {
    "default": BASE,
    "before (round 1)": BEFORE,
    "best-ranked episodes only": replace(BASE, select="episodes"),
    "names kept in the matched text": replace(BASE, strip_names=False),
    "speaker 0.4": replace(BASE, speaker_bonus=0.4),
    "speaker 0.8": replace(BASE, speaker_bonus=0.8),
    "keyword 0.2": replace(BASE, keyword_weight=0.2),
    "keyword 0.5": replace(BASE, keyword_weight=0.5),
    "neighbour 0.1": replace(BASE, neighbour_share=0.1),
    "neighbour 0.4": replace(BASE, neighbour_share=0.4),
    "episode 0.6": replace(BASE, episode_share=0.6),
    "question 0.2": replace(BASE, question_penalty=0.2),
    "episodes 80": replace(BASE, max_episodes=80),
    "no speaker prior": replace(BASE, speaker_bonus=0.0),
    "no prior cap (before issue 29)": replace(BASE, speaker_cap=False, speaker_cap_margin=0.0),
    "prior cap": replace(BASE, speaker_cap=True, speaker_cap_margin=0.0, cap_budget=None),
    "prior cap + 0.1": replace(BASE, speaker_cap=True, speaker_cap_margin=0.1, cap_budget=None),
    "prior cap + 0.15": replace(BASE, speaker_cap=True, speaker_cap_margin=0.15, cap_budget=None),
    "prior cap + 0.2": replace(BASE, speaker_cap=True, speaker_cap_margin=0.2, cap_budget=None),
    "prior cap + 0.3": replace(BASE, speaker_cap=True, speaker_cap_margin=0.3, cap_budget=None),
    # the cap's margin against the budget
    "cap margin 0.15 at every budget": replace(BASE, cap_budget=None),
    "cap margin from 500": replace(BASE, cap_budget=500, cap_decay=1.0),
    "cap margin from 1000": replace(BASE, cap_budget=1000, cap_decay=1.0),
    "cap margin from 600": replace(BASE, cap_budget=600, cap_decay=1.0),
    "cap margin from 700": replace(BASE, cap_budget=700, cap_decay=1.0),
    "cap margin from 800": replace(BASE, cap_budget=800, cap_decay=1.0),
    "cap margin from 800 squared": replace(BASE, cap_budget=800, cap_decay=2.0),
    "cap margin from 900 squared": replace(BASE, cap_budget=900, cap_decay=2.0),
    # the length penalty (retrieval.packing_order)
    "length 0.02": replace(BASE, length_penalty=0.02),  # the default since issue 29's fourth pass
    "no length penalty (before)": replace(BASE, length_penalty=0.0),
    "length 0.05": replace(BASE, length_penalty=0.05),
    # primacy: the older of near-equal matches first (0.1: the default since issue 29's fifth pass). The other
    # knobs measured on the way (a reserved share for the best match before the speaker prior, penalties from
    # what is already packed, restatements, the named person read as "I", admitting and gating the speaker
    # prior, a "when" prior, BM25 on a share of the full-match scale) lost or tied held out and left the product.
    "no primacy (before)": replace(BASE, primacy=0.0),
    "primacy 0.02": replace(BASE, primacy=0.02),
    "primacy 0.05": replace(BASE, primacy=0.05),
    "primacy 0.1": replace(BASE, primacy=0.1),  # the default since the fifth pass
    "primacy 0.15": replace(BASE, primacy=0.15),
    "primacy 0.2": replace(BASE, primacy=0.2),
    "primacy 0.3": replace(BASE, primacy=0.3),
}
SEARCH_BASE = SEARCH_POLICY
SEARCH_VARIANTS: dict[str, ScoringPolicy] = {
    "fused only (before issue 20)": replace(SEARCH_BASE, search_evidence=0.0),
    "evidence 1.0, round-1 scoring": replace(SEARCH_BASE, max_episodes=40, search_evidence=1.0, **ROUND_1),
    "evidence 1.0, 40 best-ranked episodes": replace(SEARCH_BASE, max_episodes=40, search_evidence=1.0),
    "evidence 2.0, 40 best-ranked episodes": replace(SEARCH_BASE, max_episodes=40),
    "evidence 0.1, every candidate episode": replace(SEARCH_BASE, search_evidence=0.1),
    "evidence 1.0, every candidate episode": replace(SEARCH_BASE, search_evidence=1.0),
    "default": SEARCH_BASE,  # evidence 2.0, every candidate episode
    "evidence 2.0, whole-group scoring": replace(SEARCH_BASE, select="group", max_episodes=40),
    # issue 29: the context's capped speaker prior in search too
    "prior cap + 0.15 (the context's)": replace(SEARCH_BASE, speaker_cap=True, speaker_cap_margin=0.15),
    "prior cap + 0.1": replace(SEARCH_BASE, speaker_cap=True, speaker_cap_margin=0.1),
    "prior cap": replace(SEARCH_BASE, speaker_cap=True, speaker_cap_margin=0.0),
}


class MemoReader(GroupReader):
    """A reader of one version of a group kept across requests, with its nearest-neighbour answers."""

    def __init__(self, base: GroupReader) -> None:
        self.__dict__.update(vars(base))
        self._nearest: dict[tuple[Any, ...], Any] = {}

    def nearest(self, vector: Any, *, k: int, selection: Any) -> Any:
        key = (vector.tobytes(), k, selection)
        if key not in self._nearest:
            self._nearest[key] = super().nearest(vector, k=k, selection=selection)
        return self._nearest[key]


class MemoReadModel(ReadModel):
    """A read model of its own on the service's store whose readers are kept per version of a group: variants of
    the weights read the same groups, the same episodes, messages and nearest neighbours."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self._readers: dict[tuple[Any, ...], GroupReader] = {}

    def reader(self, group_id: str, *, fresh: bool = False) -> GroupReader:
        base = super().reader(group_id, fresh=fresh)
        key = (group_id, base.version)
        if key not in self._readers:
            self._readers[key] = MemoReader(base)
        return self._readers[key]


class Memo:
    """What the variants of one dataset share: the memoised read model and a searcher over it."""

    def __init__(self, service: Any) -> None:
        self.read_model = MemoReadModel(service.memory.store)
        self.embedder = service.embedder
        self.searcher = Searcher(read_model=self.read_model, embedder=service.embedder)

    def group_rows(self, group_id: str) -> Any:
        return group_rows(self.read_model.reader(group_id))

    def builder(self, policy: PackingPolicy, counter: Any) -> ContextBuilder:
        return ContextBuilder(
            read_model=self.read_model, embedder=self.embedder, count_wordpieces=counter, policy=policy
        )


def evaluate(
    services: dict[str, Any], datasets: dict[str, list[Sample]], policy: PackingPolicy, memos: dict[str, Memo]
) -> dict[str, Scores]:
    """conversation -> Scores (context recall at each budget) under one policy."""
    found: dict[str, Scores] = {}
    for dataset, samples in datasets.items():
        wordpieces = shared_counter(services[dataset])
        builder = memos[dataset].builder(policy, wordpieces)
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


def service_query(question: str, budget: int, end: Any = None) -> Any:
    from retrieval.types import ContextQuery

    return ContextQuery(query=question, token_budget=budget, end=end)


def run(services: dict[str, Any], datasets: dict[str, list[Sample]], variants: dict[str, PackingPolicy]) -> dict:
    memos = {dataset: Memo(service) for dataset, service in services.items()}
    conversations = {s.sample_id: name for name, samples in datasets.items() for s in samples}
    results = {}
    for name, policy in variants.items():
        started = time.perf_counter()
        results[name] = evaluate(services, datasets, policy, memos)
        score = recall_report.objective(results[name], conversations, set(conversations))
        print(f"variant {name:<24} objective {score:.4f}  ({time.perf_counter() - started:.0f} s)", flush=True)
    held, chosen = recall_report.leave_one_fold_out(results, datasets)
    return {"results": results, "held": held, "chosen": chosen, "conversations": conversations, "memos": memos}


def print_loo(
    services: dict[str, Any],
    datasets: dict[str, list[Sample]],
    variants: dict[str, PackingPolicy] | None = None,
    *,
    search: bool = True,
    rrf_cache: Path | None = None,
    prefix_all: bool = False,
    prefix_budgets: Sequence[int] = (1000,),
) -> dict[str, Any]:
    outcome = run(services, datasets, variants or VARIANTS)
    results, held = outcome["results"], outcome["held"]
    rrf: dict[str, Scores] = {}
    for dataset, samples in datasets.items():
        rrf |= recall_report.rrf_per_conversation(samples, services[dataset].embedder, rrf_cache)
    print("\n## held out: leave-one-conversation-out (LoCoMo) and leave-one-circle-out (REALTALK), context weights")
    print("chosen without each fold: " + "; ".join(f"{f}: {v}" for f, v in outcome["chosen"].items()))
    for dataset, samples in datasets.items():
        print("\n".join(recall_report.held_out_tables(dataset, samples, results["default"], held, rrf)))
    print("\n### each variant in sample, per domain (objective; the others: minus the default)\n")
    print(recall_report.domain_table(results, datasets))
    for dataset, samples in datasets.items():
        ids = {s.sample_id for s in samples}
        print(f"\n### {dataset}: each variant in sample, per category\n")
        per_variant = {name: merge({c: s for c, s in scores.items() if c in ids}) for name, scores in results.items()}
        print(table(per_variant, CATEGORIES[dataset], BUDGETS, HEADLINE[dataset]))
    print("\n### targets (held out, 1,000 tokens)\n")
    print("\n".join(recall_report.targets(datasets, held, rrf)))
    for dataset, samples in datasets.items():
        memo = outcome["memos"][dataset]
        print(f"\n### {dataset}: recall against chat length\n")
        print(recall_report.length_table(samples, held, rrf, memo.group_rows))
        counter = shared_counter(services[dataset])
        builders = {
            name: memo.builder((variants or VARIANTS)[name], counter)
            for name in (results if prefix_all else ["default"])
        }
        for budget in prefix_budgets:
            costs = {
                name: recall_report.prefix_figures(
                    samples, lambda g, q, b, end, builder=builder: builder.build(g, service_query(q, b, end)), budget
                )
                for name, builder in builders.items()
            }
            print(
                f"\n### {dataset}: what the second half of a chat costs the questions about its first half "
                f"(default, {budget:,} tokens)\n"
            )
            rrf_costs = recall_report.rrf_prefix_figures(samples, services[dataset].embedder, budget)
            print(recall_report.prefix_table(costs["default"], budget, rrf=rrf_costs))
            if prefix_all:
                print(f"\n### {dataset}: the cost of the rest ({budget:,} tokens) under each variant\n")
                print(recall_report.prefix_cost_table(costs))
    if search:
        search_table(datasets, outcome["memos"])
    return outcome


def search_table(datasets: dict[str, list[Sample]], memos: dict[str, Memo]) -> None:
    """Episode recall@k of search under each of SEARCH_VARIANTS, and the variant chosen held out by fold as
    for the context (recall_report.leave_one_fold_out over ("episode", k): mean of @1..@10 over every
    question, LoCoMo's category 5 included, with the guard across LoCoMo and each REALTALK circle)."""
    keys = [("episode", k) for k in EPISODE_KS]
    found: dict[str, dict[str, Scores]] = {}
    for name, policy in SEARCH_VARIANTS.items():
        found[name] = {}
        started = time.perf_counter()
        for dataset, samples in datasets.items():
            memo = memos[dataset]
            memo.searcher.policy = policy
            search = memo.searcher.search
            found[name].update(episode_recall(lambda g, q, k, s=search: s(g, SearchQuery(query=q, k=k)), samples))
        print(f"search variant {name:<40} ({time.perf_counter() - started:.0f} s)", flush=True)
    held, chosen = recall_report.leave_one_fold_out(found, datasets, keys)
    print("\nsearch variant chosen without each fold: " + "; ".join(f"{f}: {v}" for f, v in chosen.items()))
    print("\n### search, each variant in sample, per domain (objective over @1..@10; the others: minus the default)\n")
    print(recall_report.domain_table(found, datasets, keys))
    for dataset, samples in datasets.items():
        ids = {s.sample_id for s in samples}
        parts = {dataset: ids} | (
            {f"circle {people}": set(members) for people, members in circles(samples).items()}
            if dataset == "realtalk"
            else {}
        )
        for label, members in parts.items():
            columns = [f"all ({min(HEADLINE[dataset])}-{max(HEADLINE[dataset])})"] + [
                f"{c} {CATEGORY_NAMES[c]}" for c in CATEGORIES[dataset]
            ]
            print(f"\n### search, {label}: episode recall@" + "/".join(map(str, EPISODE_KS)) + "\n")
            print("| search | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
            rows = {name: {c: s for c, s in scores.items() if c in members} for name, scores in found.items()}
            rows["held out"] = {c: s for c, s in held.items() if c in members}
            for name, scores in rows.items():
                merged = merge(scores)
                groups = [list(HEADLINE[dataset])] + [[c] for c in CATEGORIES[dataset]]
                cells = [" / ".join(f"{merged.mean(key, g):.3f}" for key in keys) for g in groups]
                print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--realtalk-data-dir", default=None, help="REALTALK's ingested folder, if not --data-dir")
    parser.add_argument("--variants", default="", help="comma-separated names of VARIANTS (default: all)")
    parser.add_argument("--datasets", default="locomo,realtalk")
    parser.add_argument("--quick", action="store_true", help="the short datasets of recall.py --quick")
    parser.add_argument("--search-only", action="store_true", help="only the search table (SEARCH_VARIANTS)")
    parser.add_argument("--no-search", action="store_true", help="leave the search table out")
    parser.add_argument("--prefix-all", action="store_true", help="the cost of the rest under every variant")
    parser.add_argument(
        "--prefix-budgets", default="1000", help="comma-separated budgets the cost of the rest is measured at"
    )
    parser.add_argument("--rrf-cache", type=Path, default=None, help="JSON file keeping the single-turn RRF figures")
    args = parser.parse_args(argv)

    from api.facade import Epimem

    names = [n for n in args.variants.split(",") if n] or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown} (names are comma-separated, as in VARIANTS)")
    datasets = {name: load_dataset(name, quick=args.quick) for name in args.datasets.split(",") if name}
    folders = {
        name: args.realtalk_data_dir if name == "realtalk" and args.realtalk_data_dir else args.data_dir
        for name in datasets
    }
    opened = {folder: Epimem.from_settings(data_dir=folder, background=False) for folder in set(folders.values())}
    try:
        services = {name: opened[folder] for name, folder in folders.items()}
        if args.search_only:
            search_table(datasets, {dataset: Memo(service) for dataset, service in services.items()})
            return
        print_loo(
            services,
            datasets,
            {n: VARIANTS[n] for n in ["default", *names] if n in VARIANTS},
            search=not args.no_search,
            rrf_cache=args.rrf_cache,
            prefix_all=args.prefix_all,
            prefix_budgets=[int(b) for b in args.prefix_budgets.split(",") if b],
        )
    finally:
        for service in opened.values():
            service.close()


if __name__ == "__main__":
    main()
