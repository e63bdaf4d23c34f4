"""A big group's read snapshot kept on disk (memory.readmodel.files): what the first search after a
start pays for it at N records, with and without the file kept at the last close.

The snapshot is a columns-only one (a group of 200,000 records is far above the full-snapshot limit) of
LoCoMo turns cycled to N records, in ``--sessions`` sessions, as messages. Printed, each measured in
this run: what a start without a kept file pays beyond reading the records from Chroma (the columns
built from the records' metadata, the keyword index tokenized), the file written at close (size, time),
and loading it (columns and the keyword index's postings); the loaded index is checked to score like
the built one. Reading the records from Chroma is measured by big_group.py on a real group.

    python tests/benchmarks/kept_snapshot.py                   # 200,000 records
    python tests/benchmarks/kept_snapshot.py --quick           # 5,000 records (CI short form)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
import numpy as np
from keyword_patch import QUERIES, texts

from memory.readmodel.files import SnapshotFiles, file_name
from memory.readmodel.snapshot import columns_snapshot, estimate_bytes
from retrieval.keyword import KEYWORDS, KeywordIndex

GROUP = "kept"


def metadatas(count: int, sessions: int) -> list[dict[str, Any]]:
    return [
        {
            "kind": "message",
            "group_id": GROUP,
            "session_id": f"s{i * sessions // count:05d}",
            "episode_id": f"e{i // 4}",
            "message_id": f"m{i}",
            "producer_id": ("Caroline", "Melanie")[i % 2],
            "ts": 1.7e9 + 60.0 * i,
        }
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="5,000 records")
    args = parser.parse_args()
    count = 5_000 if args.quick else args.records
    documents, metas = texts(count), metadatas(count, min(args.sessions, count))
    ids = [f"r{i}" for i in range(count)]
    c.heading(f"a kept read snapshot at {count:,} records (columns only)")
    KeywordIndex(columns_snapshot(GROUP, (0, None), ids[:100], documents[:100], metas[:100]))  # imports, stemmer
    started = time.perf_counter()
    snapshot = columns_snapshot(GROUP, (0, None), list(ids), list(documents), [dict(m) for m in metas])
    snapshot.nbytes = estimate_bytes(snapshot)
    columns_s = time.perf_counter() - started
    started = time.perf_counter()
    index = KeywordIndex(snapshot)
    snapshot.adopt(KEYWORDS.key, index, KEYWORDS.size(index))
    tokenized_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="epimem-kept-") as folder:
        files = SnapshotFiles(Path(folder))
        files.open()
        started = time.perf_counter()
        derivations = {KEYWORDS.key: KEYWORDS}
        files.close([snapshot], lambda group: 0, derivations)  # as at a close: written, the folder given back
        written_s = time.perf_counter() - started
        size_mb = (Path(folder) / "read-snapshots" / file_name(GROUP)).stat().st_size / 2**20
        files.open()  # the next start claims it
        started = time.perf_counter()
        loaded = files.load(GROUP, (0, None), count, derivations)
        loaded_s = time.perf_counter() - started
        assert loaded is not None and list(loaded.ids) == list(snapshot.ids)
        kept = dict(loaded.derived_items())[KEYWORDS.key]
        for query in QUERIES:
            assert np.array_equal(kept.scores(query), index.scores(query)), query
    c.line("without a kept file: beyond the Chroma read (s)", columns=columns_s, keyword_index=tokenized_s)
    c.line("kept at close (s, MB)", written=written_s, size_mb=size_mb)
    c.line("with the kept file: loaded (s)", load=loaded_s, ratio_to_tokenizing=loaded_s / tokenized_s)


if __name__ == "__main__":
    main()
