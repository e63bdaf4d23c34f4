"""Embedded Chroma's write log gets an index on (topic, seq_id): opening a collection reads its own rows,
not the whole log (memory.engine.write_log_index; the speed is measured by tests/benchmarks/partition_floor.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import chromadb
import numpy as np
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.config import Settings as ChromaSettings

from memory.engine.folder_lock import release_folder
from memory.engine.write_log_index import INDEX, index_write_log
from memory.store.connection import PARTITIONS_FOLDER, close_embedded, open_connection
from memory.store.factory import open_store
from memory.store.records import RecordFilter, VectorRecord

# What chromadb 1.5.9's engine asks when it opens a collection (its Rust sources, the log reader).
PULL = (
    "SELECT seq_id, id, operation, vector, encoding, metadata FROM embeddings_queue WHERE topic = ? AND seq_id > ? "
    "AND CAST(strftime('%s', created_at) AS INTEGER) <= (? / 1000000000) ORDER BY seq_id ASC LIMIT ?"
)


def plan(folder: Path) -> str:
    with sqlite3.connect(f"file:{folder / 'chroma.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute(f"EXPLAIN QUERY PLAN {PULL}", ("persistent://x", -1, 2**62, 100)).fetchall()
    return " ".join(str(row[-1]) for row in rows)


def records(session: int) -> list[VectorRecord]:
    vectors = np.random.default_rng(session).standard_normal((3, 384)).astype(np.float32)
    return [VectorRecord(f"s{session}-{i}", f"r{i}", {"kind": "episode"}, v) for i, v in enumerate(vectors)]


def test_the_engines_write_logs_are_indexed_and_reads_stay_exact(tmp_path: Path) -> None:
    connection = open_connection(data_dir=tmp_path, host=None, port=0, recycle_after=2)
    try:
        store = open_store(connection, model_id="test-model")
        for session in range(6):  # past the bound: the partitions' engine stops, its new database gets the index
            store.vectors.upsert("g", f"s{session}", records(session))
        assert connection.restarts >= 1
        assert INDEX in plan(tmp_path / PARTITIONS_FOLDER)
        for session in range(6):
            found = store.vectors.records("g", selection=RecordFilter(session_ids=(f"s{session}",)))
            assert sorted(r.id for r in found) == [f"s{session}-{i}" for i in range(3)]
    finally:
        close_embedded(tmp_path)
        release_folder(tmp_path)
    assert INDEX in plan(tmp_path / "chroma")  # the main engine's, at its stop


def test_a_folder_without_the_index_gets_it_when_opened(tmp_path: Path) -> None:
    folder = tmp_path / "chroma"
    client = chromadb.PersistentClient(path=str(folder), settings=ChromaSettings(anonymized_telemetry=False))
    client.get_or_create_collection("older", embedding_function=None).add(ids=["a"], embeddings=[[1.0, 0.0]])
    del client
    SharedSystemClient.clear_system_cache()
    assert INDEX not in plan(folder)  # Chroma's own schema: the pull reads the whole table
    connection = open_connection(data_dir=tmp_path, host=None, port=0)
    try:
        assert INDEX in plan(folder)
        (collection,) = connection.client.list_collections()
        assert connection.client.get_collection(collection.name).get(ids=["a"])["ids"] == ["a"]
    finally:
        close_embedded(tmp_path)
        release_folder(tmp_path)


def test_no_database_no_index(tmp_path: Path) -> None:
    assert index_write_log(tmp_path) is False
    sqlite3.connect(tmp_path / "chroma.sqlite3").close()  # a database without Chroma's tables
    assert index_write_log(tmp_path) is False
