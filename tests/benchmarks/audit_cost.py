"""What the audit trail costs an add: chat-app adds (two messages per call, no flush) on embedded Chroma,
with the trail on (every add that stores something writes one entry to the group's log) and off (the
entry's write skipped), interleaved in one process on two data folders so that noise hits both alike.

    python tests/benchmarks/audit_cost.py            # 150 adds each
    python tests/benchmarks/audit_cost.py --adds 40  # short form
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as c

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.lifecycle.audit import AuditAction

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
TOPICS = ["hiking at Lake Tahoe", "the new espresso machine", "the quarterly budget", "Rex the dog"]


def pair(index: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"m{2 * index + turn}",
            "content": f"Turn {2 * index + turn}: a few words about {TOPICS[index // 5 % len(TOPICS)]}.",
            "producer_id": ["ana", "ben"][turn],
            "timestamp": (T0 + timedelta(minutes=2 * index + turn)).isoformat(),
        }
        for turn in (0, 1)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--adds", type=int, default=150)
    args = parser.parse_args()
    embedder = SentenceTransformerEmbedder()
    with tempfile.TemporaryDirectory() as folder:
        services = {
            name: Epimem.from_settings(Settings(data_dir=Path(folder) / name), background=False, embedder=embedder)
            for name in ("audit on", "audit off")
        }
        off = services["audit off"].memory.audit
        off.record = lambda *a, **k: None  # type: ignore[method-assign,assignment,return-value]
        for service in services.values():  # warm: the group's collections exist, the model is loaded
            service.add_messages("g", "warm", pair(10_000))
        times = c.interleaved(
            {name: (lambda i, s=service: s.add_messages("g", "chat", pair(i))) for name, service in services.items()},
            args.adds,
        )
        entries = len(services["audit on"].audit("g", limit=500).entries)
        trail = services["audit on"].memory.audit
        ids = [f"m{i}" for i in range(2)]
        writes = [c.timed(lambda: trail.record("g", AuditAction.ADD, "bench", session_id="chat", targets=ids))[0]]
        writes += [
            c.timed(lambda: trail.record("g", AuditAction.ADD, "bench", session_id="chat", targets=ids))[0]
            for _ in range(args.adds)
        ]
        for service in services.values():
            service.close()
    c.heading(f"chat-app adds, 2 messages each, {args.adds} per side, embedded Chroma, offline generator")
    for name, values in times.items():
        c.line(name, **c.summary(values))
    on, plain = c.summary(times["audit on"])["p50"], c.summary(times["audit off"])["p50"]
    c.line("ratio (median on / off)", ratio=on / plain, entries=entries)
    c.line("one entry's write alone", **c.summary(writes))


if __name__ == "__main__":
    main()
