"""Held-out reporting for recall_tune.py: folds by circle of friends, the guard against a mechanism that
helps one circle and hurts another, the figures per circle beside single-turn RRF, the targets, and
recall against chat length.

Folds: each LoCoMo conversation is one (leave-one-conversation-out: its people are not in the other
conversations, although two LoCoMo conversations reuse the first name John for different people);
REALTALK's chats are grouped by circle of friends (chats that share a speaker: chats 1-4 and 5-7), so a
held-out chat never shares its people or their way of writing with the chats its weights were chosen on.

Domains (what the guard compares): LoCoMo as a whole, and each REALTALK circle. A variant is eligible
in a fold only if, on the fold's training conversations, it lowers no domain's objective by more than
:data:`TOLERANCE` against the default.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from locomo import baseline_recall
from recall import BUDGETS, CATEGORIES, CATEGORY_NAMES, HEADLINE, Sample, Scores, circles, merge, table

TOLERANCE = 0.001
TARGET_LOCOMO = 0.87  # held-out, 1,000 tokens, categories 1-4
TARGET_MARGIN = 0.15  # REALTALK held-out at 1,000 tokens over single-turn RRF, on each circle


def folds(datasets: dict[str, list[Sample]]) -> dict[str, list[str]]:
    """Fold name -> its conversations: one per LoCoMo conversation, one per REALTALK circle."""
    found: dict[str, list[str]] = {}
    for dataset, samples in datasets.items():
        if dataset == "realtalk":
            found |= {f"circle {people}": ids for people, ids in circles(samples).items()}
        else:
            found |= {s.sample_id: [s.sample_id] for s in samples}
    return found


def domains(datasets: dict[str, list[Sample]]) -> dict[str, set[str]]:
    """Domain name -> its conversations: LoCoMo whole, each REALTALK circle on its own."""
    found: dict[str, set[str]] = {}
    for dataset, samples in datasets.items():
        if dataset == "realtalk":
            found |= {f"REALTALK circle {people}": set(ids) for people, ids in circles(samples).items()}
        else:
            found[dataset] = {s.sample_id for s in samples}
    return found


def objective(
    per_conversation: dict[str, Scores], conversations: dict[str, str], keep: set[str], keys: Sequence[Any] = BUDGETS
) -> float:
    """Mean recall over the budgets (or other ``keys``: search's ("episode", k)) and every question (LoCoMo's
    category 5 included), each dataset weighing the same, over the kept conversations."""
    figures = []
    for dataset in sorted(set(conversations.values())):
        kept = {c: s for c, s in per_conversation.items() if c in keep and conversations[c] == dataset}
        if kept:
            merged = merge(kept)
            figures.append(statistics.fmean(merged.mean(k, CATEGORIES[dataset]) for k in keys))
    return statistics.fmean(figures)


def eligible(
    results: dict[str, dict[str, Scores]],
    name: str,
    conversations: dict[str, str],
    areas: dict[str, set[str]],
    keep: set[str],
    keys: Sequence[Any] = BUDGETS,
) -> bool:
    """The variant lowers no domain (within ``keep``) by more than TOLERANCE against the default."""
    for members in areas.values():
        inside = members & keep
        if inside:
            default = objective(results["default"], conversations, inside, keys)
            if objective(results[name], conversations, inside, keys) < default - TOLERANCE:
                return False
    return True


def leave_one_fold_out(
    results: dict[str, dict[str, Scores]], datasets: dict[str, list[Sample]], keys: Sequence[Any] = BUDGETS
) -> tuple[dict[str, Scores], dict[str, str]]:
    """(conversation -> held-out Scores, fold -> the variant chosen without it): each fold is scored with
    the eligible variant of the best objective on the other folds."""
    conversations = {s.sample_id: name for name, samples in datasets.items() for s in samples}
    areas = domains(datasets)
    held: dict[str, Scores] = {}
    chosen: dict[str, str] = {}
    for fold, members in folds(datasets).items():
        keep = set(conversations) - set(members)
        candidates = [n for n in results if eligible(results, n, conversations, areas, keep, keys)]
        best = max(candidates, key=lambda n: (objective(results[n], conversations, keep, keys), n == "default"))
        chosen[fold] = best
        held |= {c: results[best][c] for c in members}
    return held, chosen


def domain_table(
    results: dict[str, dict[str, Scores]], datasets: dict[str, list[Sample]], keys: Sequence[Any] = BUDGETS
) -> str:
    """Each variant's in-sample objective per domain, minus the default's; a variant that raises one
    domain and lowers another is marked (not taken by the guard where both are in a fold's training)."""
    conversations = {s.sample_id: name for name, samples in datasets.items() for s in samples}
    areas = domains(datasets)
    lines = ["| variant | " + " | ".join(areas) + " | |", "|---|" + "---|" * (len(areas) + 1)]
    for name, scores in results.items():
        base = [objective(results["default"], conversations, m, keys) for m in areas.values()]
        mine = [objective(scores, conversations, m, keys) for m in areas.values()]
        deltas = [m - b for m, b in zip(mine, base, strict=True)]
        split = max(deltas) > TOLERANCE and min(deltas) < -TOLERANCE
        cells = [f"{m:.4f}" if name == "default" else f"{d:+.4f}" for m, d in zip(mine, deltas, strict=True)]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'helps one, hurts another' if split else ''} |")
    return "\n".join(lines)


def rrf_per_conversation(samples: Sequence[Sample], embedder: Any, cache: Path | None = None) -> dict[str, Scores]:
    """Single-turn RRF per conversation; with ``cache``, read from that JSON file when it holds every
    conversation, else computed and written there (the baseline depends on the data only, not on epimem)."""
    ids = [s.sample_id for s in samples]
    if cache is not None and cache.exists():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if all(i in stored for i in ids):
            return {i: _scores(stored[i]) for i in ids}
    found = {s.sample_id: baseline_recall([s], "rrf", embedder=embedder) for s in samples}
    if cache is not None:
        stored = json.loads(cache.read_text(encoding="utf-8")) if cache.exists() else {}
        stored |= {
            i: {str(c): {str(k): v for k, v in keys.items()} for c, keys in scores.values.items()}
            for i, scores in found.items()
        }
        cache.write_text(json.dumps(stored), encoding="utf-8")
    return found


def _scores(stored: dict[str, dict[str, list[float]]]) -> Scores:
    scores = Scores()
    for category, keys in stored.items():
        for key, values in keys.items():
            scores.values[int(category)][int(key)].extend(values)
    return scores


def held_out_tables(
    dataset: str,
    samples: Sequence[Sample],
    in_sample: dict[str, Scores],
    held: dict[str, Scores],
    rrf: dict[str, Scores],
) -> list[str]:
    """Markdown tables: the dataset, then (REALTALK) each circle: RRF, in-sample default, held-out."""
    parts = {dataset: [s.sample_id for s in samples]}
    if dataset == "realtalk":
        parts |= {f"circle {people}": ids for people, ids in circles(samples).items()}
    out = []
    for label, ids in parts.items():
        rows = {
            "RRF (single turns)": merge({c: rrf[c] for c in ids}),
            "in-sample (default)": merge({c: in_sample[c] for c in ids}),
            "held-out (leave-one-circle-out)": merge({c: held[c] for c in ids}),
        }
        out.append(
            f"\n### {label} ({len(ids)} conversations)\n\n"
            + table(rows, CATEGORIES[dataset], BUDGETS, HEADLINE[dataset])
        )
    return out


def targets(
    datasets: dict[str, list[Sample]], held: dict[str, Scores], rrf: dict[str, Scores], budget: int = 1000
) -> list[str]:
    """One line per target: met or not, with the figures."""
    lines = []
    for dataset, samples in datasets.items():
        ids = [s.sample_id for s in samples]
        mine, base = merge({c: held[c] for c in ids}), merge({c: rrf[c] for c in ids})
        if dataset == "locomo":
            value = mine.mean(budget, HEADLINE[dataset])
            lines.append(
                f"LoCoMo held-out {value:.3f} >= {TARGET_LOCOMO} at {budget:,}: {_met(value >= TARGET_LOCOMO)}"
            )
        else:
            for people, members in circles(samples).items():
                m = merge({c: held[c] for c in members}).mean(budget, HEADLINE[dataset])
                r = merge({c: rrf[c] for c in members}).mean(budget, HEADLINE[dataset])
                lines.append(
                    f"REALTALK circle {people}: held-out {m:.3f} = RRF {r:.3f} {m - r:+.3f} "
                    f"(target +{TARGET_MARGIN}): {_met(m - r >= TARGET_MARGIN - 1e-9)}"
                )
        below = [
            f"{CATEGORY_NAMES[c]} at {b:,}: {mine.mean(b, [c]):.3f} < {base.mean(b, [c]):.3f}"
            for c in CATEGORIES[dataset]
            for b in BUDGETS
            if mine.mean(b, [c]) < base.mean(b, [c])
        ]
        lines.append(
            f"{dataset}: no category below RRF at any budget: {_met(not below)}"
            + ("; " + ", ".join(below) if below else "")
        )
    return lines


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def length_table(
    samples: Sequence[Sample],
    held: dict[str, Scores],
    rrf: dict[str, Scores],
    rows_of: Callable[[str], Any],
    budget: int = 1000,
) -> str:
    """Recall against chat length: one row per conversation, in order of length, with what the group's
    scoring sees (episodes, messages per episode, whether the whole group is scored)."""
    lines = [
        f"| conversation | messages | questions | epimem held-out @{budget:,} | RRF @{budget:,} | lead | episodes | "
        "messages per episode | whole group scored |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for sample in sorted(samples, key=lambda s: sum(len(m) for m in s.locomo.sessions.values())):
        c = sample.sample_id
        dataset_categories = (1, 2, 3, 4)
        messages = sum(len(m) for m in sample.locomo.sessions.values())
        mine, base = held[c].mean(budget, dataset_categories), rrf[c].mean(budget, dataset_categories)
        rows = rows_of(c)
        episodes = len(rows.episodes) if rows is not None else 0
        size = f"{len(rows) / episodes:.1f}" if episodes else "-"
        lines.append(
            f"| {c} | {messages:,} | {held[c].count(budget, dataset_categories)} | {mine:.3f} | {base:.3f} | "
            f"{mine - base:+.3f} | {episodes or '-'} | {size} | {'yes' if rows is not None else 'no'} |"
        )
    return "\n".join(lines)


def prefix_questions(sample: Sample, share: float = 0.5) -> tuple[Any, list[tuple[int, str, tuple[str, ...]]]]:
    """(the time that ends the first ``share`` of the chat's messages, the questions whose evidence all
    lies before it): what the same questions would find if the chat had stopped there."""
    from recall import scored_questions

    ordered = sorted((m for ms in sample.locomo.sessions.values() for m in ms), key=lambda m: m.timestamp)
    cut = ordered[int(len(ordered) * share)].timestamp
    before = {m.id for m in ordered if m.timestamp < cut}
    return cut, [q for q in scored_questions(sample) if set(q[2]) <= before]


def prefix_figures(
    samples: Sequence[Sample], context: Callable[..., Any], budget: int = 1000
) -> dict[str, tuple[int, float, float]]:
    """For each conversation: the questions answered in its first half, asked of the whole chat and of
    its first half only (a scope that ends there): (how many, recall of the whole chat, of the first half).
    The difference is what the second half costs them: distractors said later."""
    from locomo import evidence_recall

    found = {}
    for sample in samples:
        cut, asked = prefix_questions(sample)
        whole, half = [], []
        for _category, question, evidence in asked:
            for values, end in ((whole, None), (half, cut)):
                result = context(sample.sample_id, question, budget, end)
                cited = {m for citation in result.citations for m in citation.message_ids}
                values.append(evidence_recall(evidence, cited))
        if asked:
            found[sample.sample_id] = (len(asked), statistics.fmean(whole), statistics.fmean(half))
    return found


def rrf_prefix_figures(
    samples: Sequence[Sample], embedder: Any, budget: int = 1000
) -> dict[str, tuple[int, float, float]]:
    """prefix_figures for single-turn RRF: the same questions, ranked over every turn of the chat and over
    the turns of its first half only. What the second half costs a retriever with no episodes, no speaker
    prior and no packing policy: the distractors' own share of epimem's figure."""
    from locomo import evidence_recall, fill_budget, single_turn_ranking, turn_words

    found = {}
    for sample in samples:
        cut, asked = prefix_questions(sample)
        if not asked:
            continue
        before = {m.id for ms in sample.locomo.sessions.values() for m in ms if m.timestamp < cut}
        half_turns = [turn for turn in sample.turns if turn.dia_id in before]
        figures = []
        for turns in (sample.turns, half_turns):
            tokens, vectors = turn_words(turns), embedder.embed_batch([turn.rendered for turn in turns])
            figures.append(
                [
                    evidence_recall(
                        evidence, fill_budget(turns, single_turn_ranking("rrf", tokens, vectors, q, embedder), budget)
                    )
                    for _category, q, evidence in asked
                ]
            )
        found[sample.sample_id] = (len(asked), statistics.fmean(figures[0]), statistics.fmean(figures[1]))
    return found


def prefix_table(
    figures: dict[str, tuple[int, float, float]],
    budget: int = 1000,
    rrf: dict[str, tuple[int, float, float]] | None = None,
) -> str:
    """prefix_figures as a table, one row per conversation and one for all of them (weighted by
    questions); with ``rrf`` (rrf_prefix_figures), single-turn RRF's figures beside epimem's."""
    header = (
        f"| conversation | questions on the first half | whole chat @{budget:,} | first half only @{budget:,} "
        "| cost of the rest |"
    )
    lines = [
        header + (" RRF: whole / first half / cost |" if rrf else ""),
        "|---|---|---|---|---|" + ("---|" if rrf else ""),
    ]
    rows = dict(figures)
    count = sum(n for n, _, _ in rows.values())
    if count:
        rows["all"] = (
            count,
            sum(n * w for n, w, _ in rows.values()) / count,
            sum(n * h for n, _, h in rows.values()) / count,
        )
    if rrf:
        rrf = dict(rrf)
        total = sum(rrf[i][0] for i in figures)
        rrf["all"] = (
            total,
            sum(rrf[i][0] * rrf[i][1] for i in figures) / total,
            sum(rrf[i][0] * rrf[i][2] for i in figures) / total,
        )
    for sample_id, (n, w, h) in rows.items():
        line = f"| {sample_id} | {n} | {w:.3f} | {h:.3f} | {w - h:+.3f} |"
        if rrf:
            _, rw, rh = rrf[sample_id]
            line += f" {rw:.3f} / {rh:.3f} / {rw - rh:+.3f} |"
        lines.append(line)
    return "\n".join(lines)


def prefix_cost_table(per_variant: dict[str, dict[str, tuple[int, float, float]]]) -> str:
    """The cost of the rest (whole chat minus first half only) per variant and conversation, and its mean
    over the questions of all of them (questions: those on the first half)."""
    columns = list(next(iter(per_variant.values())))
    lines = [
        "| variant | " + " | ".join(columns) + " | all: whole / first half / cost |",
        "|---|" + "---|" * (len(columns) + 1),
    ]
    for name, figures in per_variant.items():
        count = sum(figures[c][0] for c in columns)
        whole = sum(figures[c][0] * figures[c][1] for c in columns) / count
        half = sum(figures[c][0] * figures[c][2] for c in columns) / count
        cells = [f"{figures[c][1] - figures[c][2]:+.3f}" for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {whole:.3f} / {half:.3f} / {whole - half:+.3f} |")
    return "\n".join(lines)
