"""Evidence recall on LoCoMo dev, REALTALK dev and BEAM dev: epimem's context and search against single-turn
baselines.

    .venv/bin/python tests/benchmarks/recall.py [--datasets locomo,realtalk,beam,beam500] [--data-dir DIR] [--loo]
                                                 [--quick] [--mode flushed|chat|both] [--idle SECONDS] [--budgets ..]
                                                 [--cost]

``beam`` is BEAM's ten 100K user-assistant chats, ``beam500`` its three 500K ones (tests/benchmarks/beam.py: each
chat a group, each batch a session, messages whole); their budgets are 1,000 / 2,000 / 4,000 tokens, the others'
500 / 1,000 / 2,000 (``--budgets`` sets one list for all). ``--cost`` adds what ingest and a context cost against
their floors (the messages encoded by the same embedder in batches of 64; one question's embedding), measured in
the same run.

Each conversation becomes one group (one session per session of the file, message id = dia_id),
ingested through the real pipeline with the offline episode generator; REALTALK messages keep their
own ``date_time``. With ``--data-dir`` the ingested data folder is kept and reused (a group already
holding vectors is not ingested again): reruns cost only the questions.

Printed per dataset: evidence recall per category at 500 / 1,000 / 2,000 tokens for epimem's context
and for the three single-turn baselines of ../shared/data/README.md (reproduced exactly), and
episode recall@k of search (share of the evidence message ids inside the top-k episodes' source
messages, k = 1, 3, 5, 10). ``--loo`` adds the leave-one-conversation-out figures of the tuned
context weights (tests/benchmarks/recall_tune.py) beside the in-sample ones. ``--quick`` (CI): the
first sessions of one conversation per dataset (BEAM: the first batch of one chat), no leave-one-out, and one
model for both modes that encodes each text once (the suite's ``RememberingEmbedder``: every vector the model's).

``--mode`` says how the conversations go in. ``flushed``: each conversation's sessions in one call,
every session formed before the questions (the friendliest client). ``chat``: as a chat app adds
them — two messages per ``add_messages`` call in conversation order, never a flush, the background
worker forming episodes on its own (the pending threshold, topic cuts, and the idle timer:
``--idle`` seconds, standing for the hours between a user's visits), questions asked once the
server is idle (no message pending). ``both`` runs the two on separate data folders (``DIR`` and
``DIR-chat``) and prints chat minus flushed per category and budget.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a file: make the repository importable
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import beam  # noqa: E402
from locomo import BASELINE_NAMES, BASELINES, BUDGETS, Sample, Scores, Turn, baseline_recall, evidence_recall  # noqa: E402
from locomo import load_samples as load_locomo  # noqa: E402
from locomo import questions as sample_questions  # noqa: E402

from memory.ingest.importers import read_realtalk  # noqa: E402
from tests.benchmarks._common import LOCOMO  # noqa: E402

REALTALK = Path(os.environ.get("EPIMEM_REALTALK", LOCOMO.parent / "realtalk-dev"))
EPISODE_KS = (1, 3, 5, 10)
# Every category is scored and shown; "all" (the headline figure, as in every round before) is HEADLINE's.
CATEGORIES = {"locomo": (1, 2, 3, 4, 5), "realtalk": (1, 2, 3), "beam": tuple(beam.CATEGORY_NAMES)}
CATEGORIES["beam500"] = CATEGORIES["beam"]
HEADLINE = {"locomo": (1, 2, 3, 4), "realtalk": (1, 2, 3), "beam": CATEGORIES["beam"], "beam500": CATEGORIES["beam"]}
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
CATEGORY_NAMES.update(beam.CATEGORY_NAMES)
# Assistant chats hold messages of ~250 (user) to ~1,000 (assistant) tokens: larger budgets.
DATASET_BUDGETS = {"beam": (1000, 2000, 4000), "beam500": (1000, 2000, 4000)}
QUICK_SESSIONS = 4
QUICK_MESSAGES = 160  # and no more messages than this (chat 5's first four sessions hold 412)
CHAT_PER_CALL = 2
MODES = ("flushed", "chat")


def load_realtalk(folder: str | Path = REALTALK) -> list[Sample]:
    """The chats of a REALTALK folder, each turn rendered as the README's baselines see it:
    "[its own date_time] speaker: clean_text"."""
    import json

    samples = []
    for path in sorted(Path(folder).glob("*.json")):
        parsed = read_realtalk(path)
        raw = json.loads(path.read_text(encoding="utf-8"))
        turns = [
            Turn(str(turn["dia_id"]), f"[{turn['date_time']}] {turn['speaker']}: {turn['clean_text']}")
            for number in sorted(int(k.split("_")[1]) for k in parsed.sessions)
            for turn in raw[f"session_{number}"]
        ]
        samples.append(Sample(parsed, turns))
    return samples


def load_dataset(name: str, *, quick: bool = False) -> list[Sample]:
    if name == "locomo":
        samples = load_locomo(LOCOMO, ["conv-30"] if quick else None)
    elif name == "realtalk":
        samples = load_realtalk(REALTALK)
        if quick:  # one chat of each circle of friends: the one whose short form holds the most questions
            by_id = {s.sample_id: s for s in samples}
            chosen = {
                max(ids, key=lambda i: len(scored_questions(cut(by_id[i], QUICK_SESSIONS))))
                for ids in circles(samples).values()
            }
            samples = [s for s in samples if s.sample_id in chosen]
    elif name in ("beam", "beam500"):
        samples = beam.load_beam(beam.BEAM, ("100K",) if name == "beam" else ("500K",))
        if quick:  # the first batch of the chat whose first batch holds the most questions (pages: one is enough)
            return [max((cut(s, 1) for s in samples), key=lambda s: len(scored_questions(s)))]
    else:
        raise ValueError(f"unknown dataset {name!r}: locomo, realtalk, beam (100K chats) or beam500")
    return [cut(sample, QUICK_SESSIONS) for sample in samples] if quick else samples


def circles(samples: Sequence[Sample]) -> dict[str, list[str]]:
    """Circles of friends: conversations that share a speaker (transitively) are one circle. Key: the
    circle's people, sorted; value: its conversations, in the samples' order. Each LoCoMo conversation
    is a circle of its own; REALTALK's chats 1-4 are one, 5-7 another."""
    people = {s.sample_id: {p.casefold() for p in s.locomo.speakers if p} for s in samples}
    groups: list[tuple[set[str], list[str]]] = []
    for sample_id, speakers in people.items():
        touching = [g for g in groups if g[0] & speakers]
        merged = (set(speakers).union(*(g[0] for g in touching)), [i for g in touching for i in g[1]] + [sample_id])
        groups = [g for g in groups if g not in touching] + [merged]
    order = [s.sample_id for s in samples]
    return {
        ", ".join(sorted(names)): sorted(ids, key=order.index)
        for names, ids in sorted(groups, key=lambda g: order.index(min(g[1], key=order.index)))
    }


def cut(sample: Sample, sessions: int, messages: int = QUICK_MESSAGES) -> Sample:
    """The first sessions of a conversation (at most ``sessions``, and no more than ``messages`` messages
    once the first is in), with the questions whose evidence lies in them."""
    kept: list[str] = []
    for name in list(sample.locomo.sessions)[:sessions]:
        if kept and sum(len(sample.locomo.sessions[k]) for k in kept) + len(sample.locomo.sessions[name]) > messages:
            break
        kept.append(name)
    ids = {m.id for name in kept for m in sample.locomo.sessions[name]}
    parsed = replace(
        sample.locomo,
        sessions={name: sample.locomo.sessions[name] for name in kept},
        questions=[q for q in sample.locomo.questions if q.evidence and set(q.evidence) <= ids],
    )
    return Sample(parsed, [turn for turn in sample.turns if turn.dia_id in ids])


def ingest(service: Any, samples: Sequence[Sample]) -> None:
    """Each conversation as one group through the real pipeline (skipped if the group has vectors)."""
    for sample in samples:
        if service.vector_count(sample.sample_id) == 0:
            service.ingest_locomo(sample.locomo, group_id=sample.sample_id)


def ingest_as_chat(
    service: Any, samples: Sequence[Sample], *, per_call: int = CHAT_PER_CALL, timeout: float = 1800.0
) -> float:
    """Each conversation as a chat app sends it: ``per_call`` messages per add, in conversation order,
    never a flush; then wait until the background worker has formed everything (the idle timer closes
    each session's last stretch). Returns the seconds waited after the last add."""
    for sample in samples:
        if service.vector_count(sample.sample_id) > 0:
            continue
        for session_id, messages in sample.locomo.sessions.items():
            ordered = sorted(messages, key=lambda m: m.timestamp)
            for start in range(0, len(ordered), per_call):
                service.add_messages(sample.sample_id, session_id, ordered[start : start + per_call])
    started = time.perf_counter()
    while any(
        service.pending_messages(sample.sample_id, session_id)
        for sample in samples
        for session_id in sample.locomo.sessions
    ):
        if time.perf_counter() - started > timeout:
            raise TimeoutError("messages still pending after the idle wait")
        time.sleep(0.5)
    service.wait_idle(timeout)
    return time.perf_counter() - started


def scored_questions(sample: Sample) -> list[tuple[int, str, tuple[str, ...]]]:
    """The questions the figures count: every category (LoCoMo's adversarial category 5 included, shown
    in its own column; the headline "all" is HEADLINE's categories)."""
    return [item for item in sample_questions(sample) if item[0] in CATEGORY_NAMES]


def context_recall(context: Any, samples: Sequence[Sample], budgets: Sequence[int] = BUDGETS) -> dict[str, Scores]:
    """Evidence recall of ``context(group, question, budget)`` per conversation (key: budget) and, for the BEAM
    questions whose rubric names facts, the share of those facts in the text (key: ("facts", budget)); a context
    over its budget fails the run."""
    found: dict[str, Scores] = {}
    for sample in samples:
        scores = found.setdefault(sample.sample_id, Scores())
        for category, question, evidence in scored_questions(sample):
            for budget in budgets:
                result = context(sample.sample_id, question, budget)
                if result.tokens > budget:
                    raise AssertionError(f"{result.tokens} tokens over the budget {budget}: {question!r}")
                cited = {message_id for citation in result.citations for message_id in citation.message_ids}
                scores.add(category, budget, evidence_recall(evidence, cited))
                if facts := beam.STATED.get(sample.sample_id, {}).get(question):
                    scores.add(category, ("facts", budget), beam.fact_share(facts, result.text))
    return found


def episode_recall(search: Any, samples: Sequence[Sample], ks: Sequence[int] = EPISODE_KS) -> dict[str, Scores]:
    """Share of the evidence message ids inside the top-k episodes of ``search(group, question, k)``
    (key: ("episode", k)), per conversation."""
    found: dict[str, Scores] = {}
    for sample in samples:
        scores = found.setdefault(sample.sample_id, Scores())
        for category, question, evidence in scored_questions(sample):
            hits = search(sample.sample_id, question, max(ks))
            for k in ks:
                inside = {m for hit in hits[:k] for m in hit.episode.source_message_ids}
                scores.add(category, ("episode", k), evidence_recall(evidence, inside))
    return found


_BASELINES: dict[tuple[str, str, tuple[int, ...]], Scores] = {}


def baseline(samples: Sequence[Sample], method: str, budgets: Sequence[int], embedder: Any) -> Scores:
    """A baseline's recall over ``samples``, each conversation scored once per run: a baseline reads the
    messages alone, so both ingest modes and the circles of friends share its figures."""
    per_conversation = {}
    for sample in samples:
        key = (sample.sample_id, method, tuple(budgets))
        if key not in _BASELINES:
            _BASELINES[key] = baseline_recall([sample], method, budgets, embedder=embedder)
        per_conversation[sample.sample_id] = _BASELINES[key]
    return merge(per_conversation)


def merge(per_conversation: dict[str, Scores]) -> Scores:
    merged = Scores()
    for scores in per_conversation.values():
        for category, keys in scores.values.items():
            for key, values in keys.items():
                merged.values[category][key].extend(values)
    return merged


def table(
    results: dict[str, Scores],
    categories: Sequence[int],
    budgets: Sequence[int] = BUDGETS,
    headline: Sequence[int] | None = None,
) -> str:
    """Markdown: overall ("all": the ``headline`` categories, default all of them) and per-category
    recall at each budget."""
    headline = list(headline or categories)
    columns = [f"all ({min(headline)}-{max(headline)})"] + [f"{c} {CATEGORY_NAMES[c]}" for c in categories]
    budget_label = " / ".join(f"{b:,}" for b in budgets)
    lines = [f"Evidence recall at {budget_label} tokens:", ""]
    lines += ["| retriever | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name, scores in results.items():
        groups = [headline] + [[c] for c in categories]
        cells = [" / ".join(f"{scores.mean(b, g):.3f}" for b in budgets) for g in groups]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    counts = next(iter(results.values()))
    lines += ["", "Questions: " + ", ".join(f"{c}: {counts.count(budgets[0], [c])}" for c in categories)]
    return "\n".join(lines)


def episode_table(
    results: dict[str, Scores],
    categories: Sequence[int],
    ks: Sequence[int] = EPISODE_KS,
    headline: Sequence[int] | None = None,
) -> str:
    lines = ["Episode recall@k of search (evidence message ids inside the top-k episodes):", ""]
    lines += ["| search | categories | " + " | ".join(f"@{k}" for k in ks) + " |", "|---|---|" + "---|" * len(ks)]
    for name, scores in results.items():
        for label, group in [("all", list(headline or categories))] + [(CATEGORY_NAMES[c], [c]) for c in categories]:
            figures = " | ".join(f"{scores.mean(('episode', k), group):.3f}" for k in ks)
            lines.append(f"| {name} | {label} | {figures} |")
    return "\n".join(lines)


def run_dataset(
    service: Any, name: str, samples: list[Sample], args: argparse.Namespace, mode: str = "flushed"
) -> dict[str, Any]:
    budgets = dataset_budgets(name, args.budgets)
    categories = CATEGORIES[name]
    fresh = all(service.vector_count(s.sample_id) == 0 for s in samples)
    started = time.perf_counter()
    waited = 0.0
    if mode == "chat":
        waited = ingest_as_chat(service, samples)
    else:
        ingest(service, samples)
    ingested = time.perf_counter() - started
    context_seconds: list[float] = []

    def context(group: str, question: str, budget: int) -> Any:
        began = time.perf_counter()
        result = service.context(group, question, token_budget=budget)
        if budget == budgets[0]:  # a question's first context: its embedding not cached yet
            context_seconds.append(time.perf_counter() - began)
        return result

    started = time.perf_counter()
    per_conversation = context_recall(context, samples, budgets)
    searched = episode_recall(lambda group, question, k: service.search(group, question, k=k), samples)
    answered = time.perf_counter() - started
    results = {"epimem context": merge(per_conversation)}
    if not args.no_baselines:
        for method in BASELINES:
            results[BASELINE_NAMES[method]] = baseline(samples, method, budgets, service.embedder)
    count = sum(len(scored_questions(s)) for s in samples)
    print(f"\n## {name}: {', '.join(s.sample_id for s in samples)} ({count} questions), ingested {mode}")
    how = f" (of which {waited:.1f} s waiting for the idle sessions to close)" if mode == "chat" else ""
    print(f"ingest {ingested:.1f} s{how}; questions ({len(budgets)} contexts + 1 search each) {answered:.1f} s")
    if args.cost:
        print_cost(service, samples, ingested - waited if fresh else None, context_seconds)
    print()
    print(table(results, categories, budgets, HEADLINE[name]))
    stated = results["epimem context"]
    if counted := stated.count(("facts", budgets[0]), categories):
        shares = " / ".join(f"{stated.mean(('facts', b), categories):.3f}" for b in budgets)
        print(
            f"\nStated facts in epimem's context text ({counted} questions whose rubric names what an answer should "
            f"state; per fact the share of its words in the text): {shares}"
        )
    if name == "realtalk" and not args.no_baselines:
        for people, ids in circles(samples).items():
            members = [s for s in samples if s.sample_id in ids]
            rows = {
                "epimem context": merge({c: per_conversation[c] for c in ids}),
                BASELINE_NAMES["rrf"]: baseline(members, "rrf", budgets, service.embedder),
            }
            print(f"\n### circle {people}: {', '.join(ids)}\n")
            print(table(rows, categories, budgets, HEADLINE[name]))
    print()
    print(episode_table({"epimem search": merge(searched)}, categories, headline=HEADLINE[name]))
    return {"context": per_conversation, "search": searched, "results": results}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="locomo,realtalk")
    parser.add_argument("--budgets", default=None, help="comma-separated (default: 500,1000,2000; BEAM 1000,2000,4000)")
    parser.add_argument("--data-dir", default=None, help="epimem data folder, kept and reused (default: temporary)")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--loo", action="store_true", help="leave-one-conversation-out of the tuned weights")
    parser.add_argument("--quick", action="store_true", help="first sessions of one conversation per dataset")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="flushed", help="how the messages go in")
    parser.add_argument("--idle", type=float, default=2.0, help="chat mode: EPIMEM_EPISODE_IDLE_SECONDS")
    parser.add_argument("--cost", action="store_true", help="ingest and /context against their floors")
    args = parser.parse_args(argv)

    from api.facade import Epimem

    datasets = {name: load_dataset(name, quick=args.quick) for name in args.datasets.split(",") if name}
    modes = MODES if args.mode == "both" else (args.mode,)
    embedder = None
    if args.quick:  # one model for both modes, each text encoded once (the real model's vector, as in the suite)
        from tests.helpers.embedders import RememberingEmbedder

        embedder = RememberingEmbedder()
    outcome: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="epimem-recall-") as scratch:
        base = Path(args.data_dir or scratch)
        for mode in modes:
            folder = base if mode == "flushed" or args.mode == "chat" else base.with_name(base.name + "-chat")
            chat = mode == "chat"
            service = Epimem.from_settings(
                data_dir=folder, background=chat, episode_idle_seconds=args.idle, embedder=embedder
            )
            try:
                outcome[mode] = {
                    name: run_dataset(service, name, samples, args, mode) for name, samples in datasets.items()
                }
                if args.loo and not args.quick:
                    from recall_tune import print_loo

                    print(f"\n# {mode}")
                    outcome[mode]["loo"] = print_loo(dict.fromkeys(datasets, service), datasets)
            finally:
                service.close()
    if len(modes) == 2:
        print_mode_difference(outcome, datasets, args.budgets)
    return outcome


def print_cost(service: Any, samples: Sequence[Sample], ingest_s: float | None, context_s: list[float]) -> None:
    """What ingest and a context cost against their floors, measured in the same process: the messages' lines
    encoded by the embedder in batches of 64 (what ingest cannot do without), and one question's embedding (what a
    context cannot do without)."""
    from memory.text import message_line

    lines = [message_line(m) for s in samples for messages in s.locomo.sessions.values() for m in messages]
    started = time.perf_counter()
    for first in range(0, len(lines), 64):
        service.embedder.embed_batch(lines[first : first + 64])
    floor = time.perf_counter() - started
    questions = list(dict.fromkeys(q for s in samples for _c, q, _e in scored_questions(s)))
    embedding: list[float] = []
    for question in questions:
        began = time.perf_counter()
        service.embedder.embed_batch([question])
        embedding.append(time.perf_counter() - began)
    context_ms, query_ms = statistics.median(context_s) * 1000, statistics.median(embedding) * 1000
    ingest = f"{ingest_s:.1f} s: {ingest_s / floor:.2f}x" if ingest_s is not None else "not measured (reused)"
    print(f"cost: ingest {ingest} against the embedding floor {floor:.1f} s ({len(lines)} messages encoded)")
    print(
        f"cost: /context median {context_ms:.1f} ms against one question's embedding {query_ms:.1f} ms: "
        f"{context_ms / query_ms:.2f}x ({len(context_s)} contexts, each question's first)"
    )


def dataset_budgets(name: str, given: str | None) -> list[int]:
    return [int(b) for b in given.split(",")] if given else list(DATASET_BUDGETS.get(name, BUDGETS))


def print_mode_difference(outcome: dict[str, Any], datasets: dict[str, list[Sample]], given: str | None) -> None:
    """Context recall of the chat-app mode minus the flushed mode, per dataset, category and budget
    (in-sample, default weights; with --loo the leave-one-out tables of each mode are printed above)."""
    print("\n## chat-app mode minus flushed mode (context evidence recall, default weights)")
    for name in datasets:
        categories = CATEGORIES[name]
        flushed = outcome["flushed"][name]["results"]["epimem context"]
        chat = outcome["chat"][name]["results"]["epimem context"]
        columns = ["all"] + [f"{c} {CATEGORY_NAMES[c]}" for c in categories]
        print(f"\n### {name}\n")
        print("| budget | " + " | ".join(columns) + " |")
        print("|---|" + "---|" * len(columns))
        for budget in dataset_budgets(name, given):
            groups = [list(HEADLINE[name])] + [[c] for c in categories]
            cells = [f"{chat.mean(budget, g) - flushed.mean(budget, g):+.3f}" for g in groups]
            print(f"| {budget:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
