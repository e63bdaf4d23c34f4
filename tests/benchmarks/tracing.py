"""Cost of OpenTelemetry tracing on ``POST /v1/groups/{g}/search`` p50, measured in one run.

Two real uvicorn servers on one service: one plain (tracing off, as without ``OTEL_*``), one
instrumented with a ``BatchSpanProcessor`` (the production processor) into the SDK's in-memory
exporter. Requests alternate between them in small batches so that drift hits both alike; child
spans are switched on only during the traced batches.

    python tests/benchmarks/tracing.py [--requests 300] [--messages 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import os  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import logging  # noqa: E402

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from api.facade import Epimem  # noqa: E402
from api.http.telemetry import setup_tracing  # noqa: E402
from api.server import create_app  # noqa: E402
from api.settings import Settings  # noqa: E402
from memory import tracing  # noqa: E402

TOPICS = ["hiking at Lake Tahoe", "a new puppy called Rex", "pottery classes", "a job interview", "a trip to Lisbon"]
QUERIES = ["Who has a dog?", "Where did they hike?", "What about pottery?", "the interview", "travel plans"]


def serve(app: object) -> tuple[uvicorn.Server, str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))  # type: ignore[arg-type]
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}"


def seed(service: Epimem, messages: int) -> None:
    t0 = datetime(2023, 5, 1, tzinfo=UTC)
    per_session = 40
    for session in range(max(1, messages // per_session)):
        batch = [
            {
                "id": f"s{session}m{i}",
                "content": f"Turn {i}: we talked about {TOPICS[(session + i // 8) % len(TOPICS)]} again.",
                "producer_id": ["Ana", "Ben"][i % 2],
                "timestamp": (t0 + timedelta(days=session, minutes=i)).isoformat(),
            }
            for i in range(per_session)
        ]
        service.add_messages("bench", f"s{session}", batch)
        service.flush("bench", f"s{session}")


def measure(url: str, http: httpx.Client, count: int, offset: int) -> list[float]:
    times = []
    for i in range(count):
        body = {"query": QUERIES[(offset + i) % len(QUERIES)], "k": 10}
        started = time.perf_counter()
        response = http.post(f"{url}/v1/groups/bench/search", json=body)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per variant")
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one log line per request would be measured too
    with tempfile.TemporaryDirectory() as folder:
        service = Epimem.from_settings(Settings(data_dir=Path(folder)), background=False)
        seed(service, args.messages)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        plain_server, plain = serve(create_app(service))
        traced_app = create_app(service)
        setup_tracing(traced_app, provider)
        traced_server, traced = serve(traced_app)
        off: list[float] = []
        on: list[float] = []
        with httpx.Client(timeout=60) as http:
            measure(plain, http, 20, 0)  # warm both
            measure(traced, http, 20, 0)
            for round_ in range(args.requests // args.batch):
                tracing.disable()
                off += measure(plain, http, args.batch, round_)
                tracing.enable(provider)
                on += measure(traced, http, args.batch, round_)
        tracing.disable()
        provider.force_flush()
        spans = len(exporter.get_finished_spans())
        for server in (plain_server, traced_server):
            server.should_exit = True
        service.close()
    p50_off, p50_on = statistics.median(off) * 1000, statistics.median(on) * 1000
    print(f"/search p50 tracing off: {p50_off:.2f} ms ({len(off)} requests)")
    print(f"/search p50 tracing on:  {p50_on:.2f} ms ({len(on)} requests, {spans} spans exported)")
    print(f"overhead: {100 * (p50_on / p50_off - 1):+.1f}% (target <= 5%)")


if __name__ == "__main__":
    main()
