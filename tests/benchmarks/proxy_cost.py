"""What the tests' token-checking proxy (tests/helpers/token_proxy.py) adds to a Chroma call: the same calls on one
`chroma run` server, directly and through the proxy, in alternating blocks; medians per call.

    .venv/bin/python tests/benchmarks/proxy_cost.py [--rounds 6 --calls 200]

Multiplied by the requests the proxy forwarded in a test run (printed at the end of every pytest run with the
server backend), it is what routing the server backend through the proxy costs the suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (makes the repository importable, offline)
import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.servers import ChromaServer  # noqa: E402
from helpers.token_proxy import TokenProxy  # noqa: E402

TOKEN = "tok-benchmark"


def client(port: int, token: str | None) -> chromadb.api.ClientAPI:
    headers = {"x-chroma-token": token} if token else None
    return chromadb.HttpClient(
        host="127.0.0.1", port=port, headers=headers, settings=ChromaSettings(anonymized_telemetry=False)
    )


def block(collection: chromadb.api.models.Collection.Collection, calls: int, kind: str) -> float:
    """ms per call of ``calls`` reads (by 10 ids) or writes (upserts of 20 records)."""
    started = time.perf_counter()
    for n in range(calls):
        if kind == "read":
            collection.get(ids=[f"r{i}" for i in range(10)], include=["metadatas"])
        else:
            ids = [f"w{n % 50}-{i}" for i in range(20)]
            collection.upsert(ids=ids, embeddings=np.ones((20, 8)), metadatas=[{"n": n}] * 20)
    return 1000 * (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = ChromaServer(Path(folder) / "chroma")
        server.start()
        proxy = TokenProxy(f"http://127.0.0.1:{server.port}", TOKEN).start()
        try:
            direct = client(server.port, None).create_collection("proxy-cost", embedding_function=None)
            direct.add(ids=[f"r{i}" for i in range(10)], embeddings=np.ones((10, 8)), metadatas=[{"n": 1}] * 10)
            proxied = client(proxy.port, TOKEN).get_collection("proxy-cost", embedding_function=None)
            figures: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.rounds):
                for kind in ("read", "write"):
                    for route, collection in (("direct", direct), ("proxy", proxied)):
                        figures.setdefault((kind, route), []).append(block(collection, args.calls, kind))
            counts = proxy.counts()
        finally:
            proxy.stop()
            server.stop()
    print(f"{args.rounds} rounds of {args.calls} calls per route, alternating; ms per call, medians")
    for kind in ("read", "write"):
        direct_ms = statistics.median(figures[(kind, "direct")])
        proxy_ms = statistics.median(figures[(kind, "proxy")])
        print(f"{kind:>5}: direct {direct_ms:.2f}, through the proxy {proxy_ms:.2f} (+{proxy_ms - direct_ms:.2f} ms)")
    print(f"the proxy forwarded {counts['forwarded']} requests and refused {counts['refused']}")


if __name__ == "__main__":
    main()
