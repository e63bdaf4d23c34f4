"""Episode formation on the LoCoMo dev data with the offline generator.

    python tests/benchmarks/episodes.py [--data PATH] [--samples N]
    python tests/benchmarks/episodes.py --compare [--realtalk DIR] [--target 6]

``--compare`` segments every session of LoCoMo dev and REALTALK dev (no storage) with the rule
used before issue 19 (``method="window"``) and with the scored method, and prints for each the
number of episodes, their sizes and their boundary reasons, as the ingest would form them (each
session in one batch). Otherwise the script prints the number of episodes, messages per episode
(mean / median / min / max), the boundary reasons, the throughput of the generation step alone
(episodes/s, messages/s) and of the whole ingest (embedding, segmentation, generation, storage in
an embedded Chroma in a temp folder).
Not collected by pytest; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from api.facade import Epimem  # noqa: E402
from memory.episodes.generation import OfflineEpisodeGenerator  # noqa: E402
from memory.episodes.segmentation import SegmentationPolicy, split_messages  # noqa: E402
from memory.ingest.importers import LocomoSample, read_locomo  # noqa: E402
from memory.models import Episode, Segment  # noqa: E402
from memory.text import message_line  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"
DEFAULT_REALTALK = ROOT.parent / "shared" / "data" / "realtalk-dev"


def describe(sizes: list[int]) -> str:
    return f"mean {statistics.mean(sizes):.2f}, median {statistics.median(sizes):g}, min {min(sizes)}, max {max(sizes)}"


def compare(datasets: dict[str, list[LocomoSample]], target: float) -> None:
    """Episode sizes and boundary reasons before (window rule) and after (scored), per dataset."""
    from memory.embedding.embedder import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(device="cpu")
    methods = {
        "before (window rule)": SegmentationPolicy(method="window"),
        f"after (scored, target {target:g})": SegmentationPolicy(method="scored", target_messages=target),
    }
    for name, samples in datasets.items():
        sessions = [messages for sample in samples for messages in sample.sessions.values() if messages]
        vectors = [embedder.embed_batch([message_line(m) for m in messages]) for messages in sessions]
        print(f"\n{name}: {len(samples)} conversations, {len(sessions)} sessions, {sum(map(len, sessions))} messages")
        for label, policy in methods.items():
            segments = [
                segment
                for messages, v in zip(sessions, vectors, strict=True)
                for segment in split_messages(messages, policy=policy, vectors=v)
            ]
            sizes = [len(segment.messages) for segment in segments]
            reasons = Counter(segment.boundary_reason.value for segment in segments)
            common = Counter(sizes).most_common(1)[0]
            print(
                f"  {label}: {len(segments)} episodes; sizes {describe(sizes)}; most common size {common[0]} "
                f"({common[1]}x)"
            )
            print("    boundary reasons: " + ", ".join(f"{r} {c}" for r, c in reasons.most_common()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON file")
    parser.add_argument("--samples", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--repeat", type=int, default=5, help="passes over the segments when timing generation")
    parser.add_argument("--compare", action="store_true", help="before/after segmentation, no storage")
    parser.add_argument("--realtalk", type=Path, default=DEFAULT_REALTALK, help="REALTALK chats folder")
    parser.add_argument("--target", type=float, default=SegmentationPolicy().target_messages)
    args = parser.parse_args()
    if args.compare:
        datasets = {"LoCoMo dev": read_locomo(args.data)[: args.samples]}
        if args.realtalk.is_dir():
            from memory.ingest.importers import read_realtalk

            datasets["REALTALK dev"] = [read_realtalk(path) for path in sorted(args.realtalk.glob("*.json"))]
        compare(datasets, args.target)
        return

    samples = read_locomo(args.data)[: args.samples]
    message_count = sum(len(s.messages) for s in samples)
    print(f"data: {args.data} ({len(samples)} conversations, {message_count} messages)")

    with tempfile.TemporaryDirectory(prefix="epimem-bench-") as folder:
        service = Epimem.from_settings(data_dir=Path(folder), background=False)
        started = time.perf_counter()
        episodes: list[Episode] = []
        for sample in samples:
            episodes += service.ingest_locomo(sample)
        ingest_s = time.perf_counter() - started
        timings = dict(service.stats().ingest.seconds)
        service.close()

    sizes = [e.message_count for e in episodes]
    assert sum(sizes) == message_count, "every message must be in exactly one episode"
    print(f"episodes: {len(episodes)}")
    print(f"messages per episode: {describe(sizes)}")
    reasons = Counter(e.boundary_reason.value for e in episodes)
    print("boundary reasons: " + ", ".join(f"{reason} {count}" for reason, count in reasons.most_common()))

    # The generation step alone, on exactly the segments the ingest formed.
    by_id = {m.id: m for sample in samples for m in sample.messages}
    jobs = [
        (Segment(messages=tuple(by_id[i] for i in e.source_message_ids), boundary_reason=e.boundary_reason), e)
        for e in episodes
    ]
    generator = OfflineEpisodeGenerator()
    started = time.perf_counter()
    for _ in range(args.repeat):
        for segment, episode in jobs:
            generator.generate(
                segment, group_id=episode.group_id, session_id=episode.session_id, episode_id=episode.uuid
            )
    generation_s = (time.perf_counter() - started) / args.repeat
    print(
        f"offline generation alone: {len(episodes) / generation_s:,.0f} episodes/s, "
        f"{message_count / generation_s:,.0f} messages/s ({generation_s * 1000:.1f} ms per pass)"
    )
    stages = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in sorted(timings.items()))
    print(
        f"end-to-end ingest (embedded Chroma): {ingest_s:.1f}s, {len(episodes) / ingest_s:.1f} episodes/s, "
        f"{message_count / ingest_s:.1f} messages/s [{stages}]"
    )


if __name__ == "__main__":
    main()
