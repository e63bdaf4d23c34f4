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

import chromadb
import numpy as np
import pytest
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.config import Settings as Settings_
from helpers.builders import messages
from helpers.paths import ROOT
from helpers.servers import ChromaServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.engine.folder_lock import release_folder
from memory.store.codec import index_name, partition_name
from memory.store.connection import PARTITIONS_FOLDER, close_embedded, open_connection
from memory.store.factory import open_store
from memory.store.records import RecordFilter, VectorRecord

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


def vector_records(session: int, count: int = 5) -> list[VectorRecord]:
    vectors = np.random.default_rng(session).standard_normal((count, 384)).astype(np.float32)
    return [
        VectorRecord(
            f"s{session}-r{i}", f"record {i} of {session}", {"kind": "episode", "session_id": f"s{session}"}, v
        )
        for i, v in enumerate(vectors)
    ]


def test_partitions_restart_in_their_own_engine_and_the_group_index_stays_loaded(tmp_path: Path) -> None:
    connection = open_connection(data_dir=tmp_path, host=None, port=0, recycle_after=2)
    try:
        store = open_store(connection, model_id="test-model")
        main, partitions = connection.engines
        assert (main.path, partitions.path) == (
            (tmp_path / "chroma").resolve(),
            (tmp_path / PARTITIONS_FOLDER).resolve(),
        )
        store.vectors.upsert("g", "s0", vector_records(0))
        main_client = main.client
        for session in range(1, 9):
            store.vectors.upsert("g", f"s{session}", vector_records(session))
        assert connection.restarts >= 2  # 9 partitions, a bound of 2: the partitions' engine restarted
        assert main.client is main_client  # the group index's engine never did: nothing reloaded it
        assert [c.name for c in main.client.list_collections()] == [index_name("g")]
        assert {c.name for c in partitions.client.list_collections()} == {
            partition_name("g", f"s{s}") for s in range(9)
        }
        assert store.vectors.count("g") == 45
        for session in range(9):  # every partition reads back after the restarts, as does the index
            found = store.vectors.records("g", selection=RecordFilter(session_ids=(f"s{session}",)))
            assert sorted(r.id for r in found) == [f"s{session}-r{i}" for i in range(5)]
        store.admin.drop_session("g", "s3")
        assert partition_name("g", "s3") not in store.admin.collection_names()
        assert store.vectors.count("g") == 40
    finally:
        close_embedded(tmp_path)
        release_folder(tmp_path)


def test_a_folder_written_before_keeps_its_partitions_in_one_engine(tmp_path: Path) -> None:
    """A data folder from before the partitions had an engine of their own opens as it was written."""
    older = chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=Settings_(anonymized_telemetry=False))
    older.get_or_create_collection("anything-written-before", embedding_function=None)
    del older
    SharedSystemClient.clear_system_cache()
    for _ in range(2):  # written, then opened again
        connection = open_connection(data_dir=tmp_path, host=None, port=0, recycle_after=2)
        try:
            store = open_store(connection, model_id="test-model")
            assert len(connection.engines) == 1 and not (tmp_path / PARTITIONS_FOLDER).exists()
            for session in range(4):
                store.vectors.upsert("g", f"s{session}", vector_records(session))
            assert partition_name("g", "s0") in {c.name for c in connection.client.list_collections()}
            assert store.vectors.count("g") == 20
            found = store.vectors.records("g", selection=RecordFilter(session_ids=("s2",)))
            assert sorted(r.id for r in found) == [f"s2-r{i}" for i in range(5)]
        finally:
            close_embedded(tmp_path)
            release_folder(tmp_path)
