"""/context over HTTP vs its floor, side by side in one process, on LoCoMo conversations.

Each LoCoMo dev conversation is one group (ingested through the service, offline generator). The
app is served by uvicorn in this process; for every question of the conversation, alternating
(the order reversed every other round):

- context: ``POST /v1/groups/{group}/context`` (budget 1,000 tokens) over HTTP, from this process;
- floor: the query embedding (encoded, never from the cache) plus one raw Chroma query (10
  nearest, documents and metadata) on the group's index, through the store's own client inside its
  gate - what any answer needs at the least, in the same process as the server.

Targets: p50 <= 2 x and p95 <= 3 x the floor. Also printed: the evidence recall of the contexts
(the same figure as ``locomo.py`` at 1,000 tokens for those questions) and the read cache's figures.

    python tests/benchmarks/context.py                 # all five dev conversations, every question
    python tests/benchmarks/context.py --quick         # short form: 4 sessions of one conversation, 20 questions
    python tests/benchmarks/context.py --profile       # also a pyinstrument profile of the facade's context
    python tests/benchmarks/context.py --data-dir DIR  # keep (or reuse) the ingested groups
    python tests/benchmarks/context.py --writes        # a 2-message add to the group before every round

``--writes`` measures the group as applications use it, written between every two reads: before each
round (untimed) two messages are added to a session of the group over HTTP, so every context request
reads a group whose version just changed (and the new messages, pending, are part of what it scores).
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as c
import httpx
from locomo import evidence_recall, load_samples, questions

from memory.store.codec import index_name

BUDGET = 1000
QUICK_SESSIONS = 4


def in_sessions(evidence: tuple[str, ...], sessions: int | None) -> bool:
    """Whether every evidence turn ("D3:5": session 3) is in the first ``sessions`` sessions."""
    if sessions is None:
        return True
    numbers = [dia_id[1:].split(":")[0] for dia_id in evidence]
    return all(number.isdigit() and int(number) <= sessions for number in numbers)


def server_logging() -> None:
    """Log as ``epimem serve`` does (JSON lines, one access line per request), into /dev/null; the
    client's own request log off (it is not the server's cost)."""
    import logging
    import os

    from api.logs import configure_logging

    configure_logging("INFO")
    for name in ("epimem", "uvicorn.error"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process
    logging.getLogger("httpx").setLevel(logging.WARNING)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class InProcessServer:
    """The app over ``service`` in uvicorn, in a thread of this process."""

    def __init__(self, service: Any) -> None:
        import uvicorn

        from api.server import create_app

        self.port = free_port()
        config = uvicorn.Config(create_app(service=service), host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> InProcessServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


class Floor:
    """Query embedding (encoded) + one raw Chroma query on the group's index, inside the store's gate."""

    def __init__(self, service: Any) -> None:
        self._connection = service.memory.store.connection
        self._embedder = service.embedder
        self._handles: dict[str, Any] = {}
        self._engine = -1

    def __call__(self, group_id: str, text: str) -> None:
        vector = self._embedder.embed_batch([text])[0]
        with self._connection.call() as client:
            if self._engine != self._connection.restarts:
                self._handles.clear()
                self._engine = self._connection.restarts
            name = index_name(group_id)
            collection = self._handles.get(name) or client.get_collection(name)
            self._handles[name] = collection
            collection.query(query_embeddings=[vector], n_results=10, include=["documents", "metadatas", "distances"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short form: 4 sessions of one conversation")
    parser.add_argument("--full", action="store_true", help="full sizes (the default)")
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default: all)")
    parser.add_argument("--questions", type=int, help="questions per conversation (default: all)")
    parser.add_argument("--data-dir", type=Path, help="keep (or reuse) the ingested groups here")
    parser.add_argument("--profile", action="store_true", help="pyinstrument profile of the facade's context")
    parser.add_argument("--writes", action="store_true", help="add two messages to the group before every round")
    args = parser.parse_args()
    chosen = [s for s in args.samples.split(",") if s] or (["conv-30"] if args.quick else None)
    limit = args.questions or (20 if args.quick else None)

    from api.facade import Epimem

    server_logging()
    samples = load_samples(c.LOCOMO, chosen)
    if args.quick:  # the first sessions only, and the questions whose evidence is in them
        for sample in samples:
            sample.locomo.sessions = dict(list(sample.locomo.sessions.items())[:QUICK_SESSIONS])
    with tempfile.TemporaryDirectory(prefix="epimem-context-") as scratch:
        service = Epimem.from_settings(data_dir=args.data_dir or Path(scratch), background=False)
        started = time.perf_counter()
        for sample in samples:
            if service.vector_count(sample.sample_id) == 0:
                service.ingest_locomo(sample.locomo, group_id=sample.sample_id)
        mode = ", a 2-message write before every round" if args.writes else ""
        c.heading(f"context: {len(samples)} LoCoMo conversation(s), budget {BUDGET}, over HTTP in this process{mode}")
        c.line("ingest (s)", seconds=time.perf_counter() - started)
        floor = Floor(service)
        run = int(time.time())
        all_times: dict[str, list[float]] = {"context": [], "floor": []}
        recalls: list[float] = []
        with InProcessServer(service) as server, httpx.Client(base_url=server.url, timeout=120) as http:

            def context(group: str, question: str) -> Any:
                response = http.post(f"/v1/groups/{group}/context", json={"query": question, "token_budget": BUDGET})
                response.raise_for_status()
                return response.json()

            for sample in samples:
                group = sample.sample_id
                kept = QUICK_SESSIONS if args.quick else None
                asked = [
                    (category, q, evidence)
                    for category, q, evidence in questions(sample)
                    if category != 5 and in_sessions(evidence, kept)
                ]
                asked = asked[:limit] if limit else asked
                for _, question, _ in asked[:3]:  # warm-up: the first request builds the group's snapshot
                    context(group, question)
                    floor(group, question)
                found: dict[int, Any] = {}

                def write(i: int, group: str = group) -> None:
                    said = [  # ids of this run: a reused data folder already holds earlier runs' writes
                        {"id": f"w{run}-{i}-{n}", "content": f"Status {i}.{n}: all quiet, just checking in."}
                        for n in (0, 1)
                    ]
                    http.post(
                        f"/v1/groups/{group}/sessions/live-writes/messages", json={"messages": said}
                    ).raise_for_status()

                times = c.interleaved(
                    {
                        "context": lambda i, group=group, asked=asked, found=found: found.__setitem__(
                            i, context(group, asked[i][1])
                        ),
                        "floor": lambda i, group=group, asked=asked: floor(group, asked[i][1]),
                    },
                    len(asked),
                    before=write if args.writes else None,
                )
                for i, (_, _, evidence) in enumerate(asked):
                    cited = {m for citation in found[i]["citations"] for m in citation["message_ids"]}
                    recalls.append(evidence_recall(evidence, cited))
                figures = {name: c.summary(values) for name, values in times.items()}
                c.line(
                    f"{group} (ms)",
                    questions=len(asked),
                    context_p50=figures["context"]["p50"],
                    context_p95=figures["context"]["p95"],
                    floor_p50=figures["floor"]["p50"],
                    floor_p95=figures["floor"]["p95"],
                    ratio_p50=figures["context"]["p50"] / figures["floor"]["p50"],
                    ratio_p95=figures["context"]["p95"] / figures["floor"]["p95"],
                )
                for name, values in times.items():
                    all_times[name] += values
        overall = {name: c.summary(values) for name, values in all_times.items()}
        c.line("context over HTTP (ms)", **overall["context"])
        c.line("floor: embedding + raw query (ms)", **overall["floor"])
        c.line("ratio context / floor p50", ratio=overall["context"]["p50"] / overall["floor"]["p50"], target=2.0)
        c.line("ratio context / floor p95", ratio=overall["context"]["p95"] / overall["floor"]["p95"], target=3.0)
        c.line("evidence recall (categories 1-4)", recall=sum(recalls) / len(recalls), questions=len(recalls))
        cache = getattr(service.stats(), "read_cache", None)
        if cache is not None:
            c.line(
                "read cache",
                groups=cache.groups,
                full=cache.full_groups,
                records=cache.records,
                mb=cache.bytes / 2**20,
                hits=cache.hits,
                builds=cache.builds,
                build_s=cache.build_seconds,
            )
        if args.profile:
            from pyinstrument import Profiler

            sample = samples[0]
            asked = [q for _, q, _ in questions(sample)][:60]
            profiler = Profiler(interval=0.0005)
            profiler.start()
            for question in asked:
                service.context(sample.sample_id, question, token_budget=BUDGET)
            profiler.stop()
            print(profiler.output_text(unicode=False, color=False, show_all=False))
        service.close()


if __name__ == "__main__":
    main()
