"""Every read of the recall benchmark, written out to compare two versions of the code byte for byte.

    .venv/bin/python tests/benchmarks/read_identity.py --data-dir DIR --out reads.jsonl [--datasets locomo,realtalk]

``DIR`` is a data folder that ``tests/benchmarks/recall.py --data-dir DIR`` ingested. For every question of
the datasets (all categories), one line per budget with the context's text, tokens and citations, and one
line with the search hits (ids, scores and their components). Run it from two trees on copies of one folder
(``PYTHONPATH=OTHER_TREE`` reads with the other code) and compare the files: a refactor of the read path
must leave them equal (``cmp``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TREE = Path(os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or Path(__file__).resolve().parents[2])
sys.path[:0] = [str(TREE), str(TREE / "tests" / "benchmarks")]

from locomo import BUDGETS  # noqa: E402
from locomo import questions as sample_questions  # noqa: E402
from recall import load_dataset  # noqa: E402

from api.facade import Epimem  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--datasets", default="locomo,realtalk")
    args = parser.parse_args()
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
    print(f"{lines} reads written to {args.out} (code from {TREE})")


if __name__ == "__main__":
    main()
