"""What a backup and a restore cost on the dev data (embedded Chroma): LoCoMo conversations and REALTALK chats
ingested as groups of one data folder, then a server backup (seconds, file size) and a restore into an empty
folder (seconds). The restored store's answers to every question of the data set are compared with the
source's: the records are equal byte for byte, but vector candidates come from Chroma's approximate (HNSW)
index, which a restore builds anew, so a few rankings may differ.

    HF_HUB_OFFLINE=1 EPIMEM_BENCHMARK_DATA=../shared/data python tests/benchmarks/backup_restore.py \\
        [--locomo N] [--realtalk N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmark_data import locomo_file, realtalk_folder  # noqa: E402

from api.facade import Epimem  # noqa: E402
from memory.embedding.embedder import SentenceTransformerEmbedder  # noqa: E402
from memory.ingest.importers import read_locomo, read_realtalk  # noqa: E402


def reads(service: Epimem, group_id: str, questions: list[str]) -> list[tuple[object, object, object]]:
    """For each question: the search hits' ids, with their scores, and the context."""
    found = []
    for question in questions:
        hits = service.search(group_id, question, k=10)
        context = service.context(group_id, question, token_budget=1000).text
        found.append(([h.episode.uuid for h in hits], [h.score for h in hits], context))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--locomo", type=int, default=1, help="LoCoMo conversations to ingest")
    parser.add_argument("--realtalk", type=int, default=1, help="REALTALK chats to ingest")
    args = parser.parse_args()
    samples = read_locomo(locomo_file())[: args.locomo]
    folder = realtalk_folder()
    if folder is not None:
        samples += [read_realtalk(path) for path in sorted(folder.glob("*.json"))[: args.realtalk]]
    embedder = SentenceTransformerEmbedder()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        source = Epimem.from_settings(data_dir=root / "source", background=False, embedder=embedder)
        messages = 0
        for sample in samples:
            source.ingest_locomo(sample)
            messages += sum(len(batch) for batch in sample.sessions.values())
        questions = {sample.sample_id: [q.question for q in sample.questions] for sample in samples}
        before = {sample.sample_id: reads(source, sample.sample_id, questions[sample.sample_id]) for sample in samples}
        file = root / "server.backup.gz"
        began = time.perf_counter()
        summary = source.backup(file)
        backup_s = time.perf_counter() - began
        size_mb = file.stat().st_size / 1e6
        source.close()
        target = Epimem.from_settings(data_dir=root / "restored", background=False, embedder=embedder)
        began = time.perf_counter()
        receipt = target.restore(file)
        restore_s = time.perf_counter() - began
        after = {sample.sample_id: reads(target, sample.sample_id, questions[sample.sample_id]) for sample in samples}
        target.close()
    pairs = [(b, a) for group in before for b, a in zip(before[group], after[group], strict=True)]
    same_ids = sum(b[0] == a[0] for b, a in pairs)
    same_scores = sum(b[:2] == a[:2] for b, a in pairs)
    same_context = sum(b[2] == a[2] for b, a in pairs)
    print(
        f"{len(samples)} groups, {messages} messages, {summary.collections} collections, {summary.records} records: "
        f"backup {backup_s:.2f} s, {size_mb:.2f} MB, restore {restore_s:.2f} s "
        f"(inexact vectors {receipt.inexact_vectors})\n{len(pairs)} questions: the same hits in the same order "
        f"{same_ids}, with the same scores {same_scores}, the same context {same_context}"
    )


if __name__ == "__main__":
    main()
