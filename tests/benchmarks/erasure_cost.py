"""What erasure costs on a LoCoMo-size group (embedded Chroma): one LoCoMo conversation ingested
as a group (plus a second one beside it), then the time of a message delete, an episode delete, a
session delete and a group delete (each includes erasure), and of one erasure alone.

    HF_HUB_OFFLINE=1 python tests/benchmarks/erasure_cost.py [path/to/locomo-dev.json]
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from api.facade import Epimem
from api.settings import Settings
from memory.engine.erasure import ErasureReport
from memory.ingest.importers import read_locomo

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo-dev.json"


ERASURES: list[ErasureReport] = []


def _timed(label: str, action: Callable[[], object]) -> None:
    ERASURES.clear()
    began = time.perf_counter()
    action()
    total = time.perf_counter() - began
    erasing = sum(report.seconds for report in ERASURES)
    rebuilt = sum(len(report.rebuilt) for report in ERASURES)
    print(f"{label:<20} {total:6.2f} s in all, of which erasure {erasing:5.2f} s ({rebuilt} collections rebuilt)")


def main() -> None:
    samples = read_locomo(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)[:2]
    with tempfile.TemporaryDirectory() as folder:
        service = Epimem.from_settings(Settings(data_dir=Path(folder)))
        connection = service.memory.store.connection
        erase = connection.erase

        def recorded(names: object = ()) -> ErasureReport | None:
            report = erase(names)  # type: ignore[arg-type]
            if report is not None:
                ERASURES.append(report)
            return report

        connection.erase = recorded  # type: ignore[method-assign]
        for sample in samples:
            service.ingest_locomo(sample)
        group = samples[0].sample_id
        sessions = sorted(samples[0].sessions)
        messages = sum(len(m) for m in samples[0].sessions.values())
        size = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
        print(f"group {group}: {len(sessions)} sessions, {messages} messages; folder {size / 1e6:.1f} MB")
        _timed("erasure alone", connection.erase)
        first = service.history(group, sessions[0])[0]
        _timed("delete a message", lambda: service.delete_message(group, sessions[0], first.id))
        episode = service.timeline(group, session_id=sessions[1], limit=5).episodes[0]
        _timed("delete an episode", lambda: service.delete_episode(group, sessions[1], episode.uuid))
        _timed("delete a session", lambda: service.delete_session(group, sessions[2]))
        _timed("delete the group", lambda: service.delete_group(group))
        service.close()


if __name__ == "__main__":
    main()
