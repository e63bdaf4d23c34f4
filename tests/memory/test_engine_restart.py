"""Embedded Chroma is restarted between calls to release the vector indexes it keeps loaded
(EPIMEM_CHROMA_RECYCLE_AFTER): reads stay correct across restarts, also under concurrent traffic,
and resident memory stays bounded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers.builders import messages
from helpers.paths import ROOT
from helpers.servers import ChromaServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.store.connection import open_connection

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow


def chat(session: int, count: int = 4) -> list[dict[str, str]]:
    return messages(
        count,
        prefix=f"s{session}-m",
        start=datetime(2024, 3, 1 + session % 28, 10, tzinfo=UTC),
        text=f"In session {session} we talked about topic number {session} and detail {{i}}.",
        speakers=(),
        role="user",
    )


def test_reads_stay_correct_across_engine_restarts(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path / "data", chroma_recycle_after=3), embedder=embedder, background=False
    )
    try:
        group = "g"
        for session in range(8):
            service.add_messages(group, f"s{session}", chat(session))
            service.flush(group, f"s{session}")
        service.delete_message(group, "s2", "s2-m0")
        service.delete_session(group, "s5")
        restarts_before = service.memory.store.connection.restarts
        assert restarts_before >= 2  # 8 partitions, their log and index: several bounds passed

        def read(session: int) -> list[str]:
            hits = service.search(group, f"topic number {session}", k=10, session_ids=[f"s{session}"], expand=True)
            return sorted(m.id for hit in hits for m in hit.messages)

        with ThreadPoolExecutor(max_workers=4) as pool:  # concurrent reads while restarts happen
            results = list(pool.map(read, [s for s in range(8) for _ in range(3)]))
        assert service.memory.store.connection.restarts > restarts_before
        for session, found in zip([s for s in range(8) for _ in range(3)], results, strict=True):
            expected = [m["id"] for m in chat(session)]
            if session == 2:
                expected = expected[1:]  # deleted before the restarts: it must not come back
            if session == 5:
                expected = []
            assert found == sorted(expected), session
        group_hits = service.search(group, "topic number 2 detail 0", k=50, expand=True)
        assert "s2-m0" not in {m.id for hit in group_hits for m in hit.messages or []}
        assert not [hit for hit in group_hits if hit.episode.session_id == "s5"]
    finally:
        service.close()


def test_a_server_connection_is_never_restarted(tmp_path: Path, chroma_server: ChromaServer) -> None:
    connection = open_connection(data_dir=tmp_path, host="127.0.0.1", port=chroma_server.port, recycle_after=1)
    assert connection.recycle_after == 0 and connection.restart() is False


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np, psutil
    from memory.store.connection import open_connection
    from memory.store.factory import open_store
    from memory.store.records import RecordFilter, VectorRecord

    data_dir, recycle_after = Path(sys.argv[1]), int(sys.argv[2])
    store = open_store(open_connection(data_dir=data_dir, host=None, port=0, recycle_after=recycle_after),
                       model_id="test:384")
    rng = np.random.default_rng(1)
    before = psutil.Process().memory_info().rss
    for i in range(60):
        vectors = rng.standard_normal((20, 384)).astype(np.float32)
        records = [VectorRecord(id=f"e{i}-{j}", document="x", metadata={"kind": "episode"}, embedding=v)
                   for j, v in enumerate(vectors)]
        store.vectors.upsert("g", f"s{i}", records)
        assert len(store.vectors.query("g", vectors[0], k=30, selection=RecordFilter(session_ids=(f"s{i}",)))) == 20
    grown = (psutil.Process().memory_info().rss - before) / 2**20
    print(json.dumps({"grown_mb": grown, "restarts": store.connection.restarts}))
    """
)


def grown(data_dir: Path, recycle_after: int) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(data_dir), str(recycle_after)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_restarting_the_engine_bounds_resident_memory(tmp_path: Path) -> None:
    unbounded = grown(tmp_path / "unbounded", 0)
    bounded = grown(tmp_path / "bounded", 8)
    assert unbounded["restarts"] == 0 and bounded["restarts"] >= 5
    # ~2.7 MB per partition held for ever vs at most ~8 partitions' worth.
    assert unbounded["grown_mb"] > 100, unbounded
    assert bounded["grown_mb"] < unbounded["grown_mb"] / 2, (bounded, unbounded)
