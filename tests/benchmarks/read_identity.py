"""Every read of the recall benchmark, written out to compare two versions of the code byte for byte.

    .venv/bin/python tests/benchmarks/read_identity.py --data-dir DIR --out reads.jsonl [--datasets locomo,realtalk]

``DIR`` is a data folder that ``tests/benchmarks/recall.py --data-dir DIR`` ingested. For every question of
the datasets (all categories), one line per budget with the context's text, tokens and citations, and one
line with the search hits (ids, scores and their components). Run it from two trees on copies of one folder
(``PYTHONPATH=OTHER_TREE`` reads with the other code) and compare the files: a refactor of the read path
must leave them equal (``cmp``).

The nearest-neighbour answers of embedded Chroma are not a function of the query alone: the last few of ``k`` can
change with what the process did before (seen with chromadb 1.5.9: computing something else first moved ranks 77-79
of 80). So one run records every ``nearest`` answer (``--record FILE``) and the other replays them (``--replay
FILE``): the comparison is then of the read path's code alone, given the same store answers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

TREE = Path(os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or Path(__file__).resolve().parents[2])
sys.path[:0] = [str(TREE), str(TREE / "tests" / "benchmarks")]

from locomo import BUDGETS  # noqa: E402
from locomo import questions as sample_questions  # noqa: E402
from recall import load_dataset  # noqa: E402

from api.facade import Epimem  # noqa: E402
from memory.store.vectors import VectorStore  # noqa: E402


def pin_nearest(record: str | None, replay: str | None) -> Any:
    """Record every ``VectorStore.nearest`` answer, or answer from a recording; returns a function that saves."""
    original = VectorStore.nearest
    answers: dict[str, Any] = {}
    if replay:
        with open(replay, "rb") as file:
            answers = pickle.load(file)

    def key(group_id: str, vector: Any, k: int, selection: Any) -> str:
        return hashlib.sha256(repr((group_id, k, selection)).encode() + vector.tobytes()).hexdigest()

    def nearest(self: VectorStore, group_id: str, vector: Any, *, k: int, selection: Any = None) -> Any:
        name = key(group_id, vector, k, selection)
        if replay:
            return answers[name]
        answers[name] = original(self, group_id, vector, k=k, selection=selection)
        return answers[name]

    VectorStore.nearest = nearest  # type: ignore[method-assign]

    def save() -> None:
        if record:
            with open(record, "wb") as file:
                pickle.dump(answers, file)

    return save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--datasets", default="locomo,realtalk")
    parser.add_argument("--record", help="write every nearest-neighbour answer to this file")
    parser.add_argument("--replay", help="answer nearest-neighbour queries from this recording")
    args = parser.parse_args()
    save = pin_nearest(args.record, args.replay)
    service = Epimem.from_settings(data_dir=args.data_dir, background=False)
    lines = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for name in args.datasets.split(","):
            for sample in load_dataset(name):
                for _category, question, _evidence in sample_questions(sample):
                    for budget in BUDGETS:
                        found = service.context(sample.sample_id, question, token_budget=budget)
                        row = {"q": question, "budget": budget, "context": found.model_dump(mode="json")}
                        out.write(json.dumps(row, sort_keys=True) + "\n")
                    hits = service.search(sample.sample_id, question, k=10)
                    row = {
                        "q": question,
                        "hits": [[h.episode.uuid, h.score, h.components.model_dump(mode="json")] for h in hits],
                    }
                    out.write(json.dumps(row, sort_keys=True) + "\n")
                    lines += 1 + len(BUDGETS)
    service.close()
    save()
    print(f"{lines} reads written to {args.out} (code from {TREE})")


if __name__ == "__main__":
    main()
