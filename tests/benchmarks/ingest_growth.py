"""Ingest into a big group vs into an empty group, in one run (issue 31 point 4).

The same adds go to an empty group and to a group that already holds ``--messages`` messages,
alternating call by call so both see the same load: ``chat`` adds 2 messages per call as applications
do (no flush), ``bulk`` adds 500 per call and flushes each session (what an import does). Every
call goes through the facade (``add_messages``, ``flush``): embedding, the log, the partition and the
group index, formation. The big group is written once at the store level, cheaply: formed messages
in the log and their vector records (random unit vectors) with one episode per 10 messages.

    python tests/benchmarks/ingest_growth.py                      # 60,000 messages in 600 sessions
    python tests/benchmarks/ingest_growth.py --quick              # 3,000 messages (CI short form)
    python tests/benchmarks/ingest_growth.py --server             # the same against a real `chroma run`
    python tests/benchmarks/ingest_growth.py --data-dir D         # keep the big group in D (built once)
    py-spy record --native -o prof.txt --format raw -- python tests/benchmarks/ingest_growth.py   # a profile

Target: the big group's rate (messages/s) >= 90% of the empty group's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as c
import numpy as np

from api.facade import Epimem
from api.settings import Settings
from memory.models import BoundaryReason, Episode, GenerationMethod, Message, MessageState, StoredMessage
from memory.store.factory import Store
from memory.store.records import VectorRecord

sys.path.insert(0, str(c.ROOT / "tests"))
from helpers.servers import ChromaServer  # noqa: E402

BIG, EMPTY = "big-group", "empty-group"
DIMENSION = 384
WORDS = (
    "garden painting concert hiking recipe camping museum guitar marathon adoption pottery birthday vacation "
    "beach library festival workshop interview promotion bakery puppy sunset mountain river career school"
).split()
START = datetime(2023, 1, 1, tzinfo=UTC)


def text(rng: np.random.Generator, number: int) -> str:
    words = " ".join(rng.choice(WORDS, 6))
    return f"Message {number}: we talked about the {words} and what comes next."


def prefill(store: Store, messages: int, per_session: int, seed: int = 5) -> float:
    """The big group at the store level: formed messages (log + vector records), an episode per 10."""
    rng = np.random.default_rng(seed)
    store.log.register_group(BIG)
    started = time.perf_counter()
    sessions = -(-messages // per_session)
    for number in range(sessions):
        session = f"old-{number:05d}"
        count = min(per_session, messages - number * per_session)
        stored, records = [], []
        for index in range(count):
            when = START + timedelta(days=number % 365, minutes=index)
            episode_id = f"ep-{number:05d}-{index // 10:03d}"
            message = Message(id=f"m{index:04d}", role="user", content=text(rng, index), timestamp=when)
            stored.append(
                StoredMessage(
                    group_id=BIG,
                    session_id=session,
                    message=message,
                    state=MessageState.DONE,
                    episode_id=episode_id,
                    boundary_reason=BoundaryReason.FLUSH,
                    sequence=index,
                )
            )
            if index % 10 == 0:
                episode = Episode(
                    uuid=episode_id,
                    title=f"Session {number} part {index // 10}",
                    content=text(rng, index),
                    timestamp=when,
                    group_id=BIG,
                    session_id=session,
                    message_count=min(10, count - index),
                    source_message_ids=tuple(f"m{i:04d}" for i in range(index, min(index + 10, count))),
                    boundary_reason=BoundaryReason.FLUSH,
                    generation=GenerationMethod.OFFLINE,
                )
                records.append(VectorRecord.of_episode(episode))
            records.append(VectorRecord.of_message(stored[-1]))
        vectors = rng.standard_normal((len(records), DIMENSION)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.log.insert_messages(BIG, stored)
        embedded = [record.with_embedding(vector) for record, vector in zip(records, vectors, strict=True)]
        store.vectors.upsert_sessions(BIG, {session: embedded})
        if number % max(1, sessions // 10) == 0:
            print(f"  prefill: {number * per_session} messages, {time.perf_counter() - started:.0f} s", flush=True)
    return time.perf_counter() - started


def new_messages(prefix: str, count: int, rng: np.random.Generator, day: int) -> list[dict[str, Any]]:
    when = START + timedelta(days=400 + day)
    return [
        {
            "id": f"{prefix}-{index:04d}",
            "role": "user" if index % 2 == 0 else "assistant",
            "content": text(rng, index),
            "timestamp": (when + timedelta(seconds=30 * index)).isoformat(),
        }
        for index in range(count)
    ]


def alternate(calls: int, run: Callable[[str, int], int]) -> dict[str, dict[str, list[float]]]:
    """``run(group, call)`` for both groups in turn (which goes first alternates): seconds per message,
    wall clock and CPU (the process's, every thread: what a shared machine's load barely moves)."""
    per_message: dict[str, dict[str, list[float]]] = {g: {"wall": [], "cpu": []} for g in (BIG, EMPTY)}
    for call in range(calls):
        for group in (BIG, EMPTY) if call % 2 == 0 else (EMPTY, BIG):
            started, cpu_started = time.perf_counter(), time.process_time()
            count = run(group, call)
            per_message[group]["wall"].append((time.perf_counter() - started) / count)
            per_message[group]["cpu"].append((time.process_time() - cpu_started) / count)
    return per_message


RUN = f"{int(time.time())}"  # new sessions on every run, also on a reused data folder


def chat(service: Epimem, sessions: int, calls_per_session: int) -> Callable[[str, int], int]:
    rng = np.random.default_rng(9)
    texts = {
        group: [new_messages(f"c{s}", 2 * calls_per_session, rng, s) for s in range(sessions)] for group in (BIG, EMPTY)
    }

    def run(group: str, call: int) -> int:
        session = call % sessions  # round robin over the sessions, as several users would
        turn = call // sessions
        service.add_messages(group, f"chat-{RUN}-{session}", texts[group][session][2 * turn : 2 * turn + 2])
        return 2

    return run


def bulk(service: Epimem, size: int) -> Callable[[str, int], int]:
    rng = np.random.default_rng(11)

    def run(group: str, call: int) -> int:
        messages = new_messages(f"b{call}", size, rng, call)
        service.add_messages(group, f"bulk-{RUN}-{call}", messages)
        service.flush(group, f"bulk-{RUN}-{call}")
        return size

    return run


def report(name: str, per_message: dict[str, dict[str, list[float]]]) -> float:
    """Prints the rates (messages per second) and returns big / empty of the median call, wall clock."""
    ratios = {}
    for clock in ("wall", "cpu"):
        rates = {group: 1 / float(np.median(found[clock])) for group, found in per_message.items()}
        means = {group: len(found[clock]) / sum(found[clock]) for group, found in per_message.items()}
        ratios[clock] = rates[BIG] / rates[EMPTY]
        label = f"{name}: msg/s{' of CPU' if clock == 'cpu' else ''}"
        c.line(f"{label}, median call", big=rates[BIG], empty=rates[EMPTY], ratio=ratios[clock])
        c.line(f"{label}, all calls", big=means[BIG], empty=means[EMPTY], ratio=means[BIG] / means[EMPTY])
    return ratios["wall"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form: 3,000 messages, fewer calls")
    parser.add_argument("--messages", type=int, help="messages in the big group (default 60,000)")
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--chat-calls", type=int, help="2-message calls per group (default 200)")
    parser.add_argument("--chat-sessions", type=int, default=10, help="sessions the chat calls take turns on")
    parser.add_argument("--bulk-calls", type=int, help="500-message calls per group, each a session (default 4)")
    parser.add_argument("--server", action="store_true", help="against a real `chroma run` on the data folder")
    parser.add_argument("--data-dir", type=Path, help="keep the data here; a big group already there is reused")
    args = parser.parse_args()
    messages = args.messages or (3000 if args.quick else 60000)
    chat_calls = args.chat_calls or (40 if args.quick else 200)
    bulk_calls = args.bulk_calls or (1 if args.quick else 4)
    bulk_size = 100 if args.quick else 500

    with tempfile.TemporaryDirectory(prefix="epimem-ingest-growth-") as scratch:
        data_dir = args.data_dir or Path(scratch)
        server = ChromaServer(data_dir / "chroma-server") if args.server else None
        if server is not None:
            server.path.mkdir(parents=True, exist_ok=True)
            server.start()
        try:
            # A generous timeout: a flush of 500 messages on a loaded machine outlasts the default 10 s.
            settings = Settings(data_dir=data_dir, chroma_host="127.0.0.1" if server else None, chroma_timeout_s=300)
            if server is not None:
                settings = settings.model_copy(update={"chroma_port": server.port})
            service = Epimem.from_settings(settings, background=False)
            store: Store = service.memory.store
            backend = "a Chroma server" if server else "embedded Chroma"
            c.heading(f"ingest growth on {backend}: a group of {messages} messages vs an empty one")
            held = store.log.count_messages(BIG, "old-00000", states=[MessageState.DONE])
            if held:
                c.line("big group reused", vectors=store.vectors.count(BIG))
            else:
                c.line("big group built at the store level (s)", seconds=prefill(store, messages, args.per_session))
            c.line("vectors in the big group's index", vectors=store.vectors.count(BIG))
            for group in (BIG, EMPTY):
                service.add_messages(group, f"warm-up-{RUN}", new_messages("warm", 2, np.random.default_rng(1), 0))
            chatted = alternate(chat_calls, chat(service, args.chat_sessions, -(-chat_calls // args.chat_sessions)))
            ratio_chat = report("chat (2 per call)", chatted)
            bulked = alternate(bulk_calls, bulk(service, bulk_size))
            ratio_bulk = report(f"bulk ({bulk_size} per call + flush)", bulked)
            c.line("ratio big / empty (target >= 0.9)", chat=ratio_chat, bulk=ratio_bulk)
            c.line("engine restarts", restarts=store.connection.restarts)
            service.close()
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
