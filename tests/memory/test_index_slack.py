"""An embedded engine restart zeroes the unused capacity of the vector indexes saved since the last
restart, and leaves every other index file as it is (it used to rewrite all of them: O(partitions)
per restart, memory.engine.erasure.zero_all_index_slack)."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import numpy as np

from memory.engine.folder_lock import release_folder
from memory.store.codec import partition_name
from memory.store.connection import PARTITIONS_FOLDER, close_embedded, open_connection
from memory.store.factory import open_store
from memory.store.records import RecordFilter, VectorRecord

GROUP = "g"
HEADER = struct.Struct("<iQQQQ")  # version, offsetLevel0, max_elements, cur_element_count, size_data_per_element


def records(session: int) -> list[VectorRecord]:
    vectors = np.random.default_rng(session).standard_normal((5, 384)).astype(np.float32)
    return [
        VectorRecord(f"s{session}-r{i}", f"record {i} of session {session}", {"kind": "message"}, vectors[i])
        for i in range(5)
    ]


def index_folder(chroma: Path, session: int) -> Path:
    """The vector index folder of a session's partition (its VECTOR segment)."""
    with sqlite3.connect(f"file:{chroma / 'chroma.sqlite3'}?mode=ro", uri=True) as db:
        (segment,) = db.execute(
            "SELECT s.id FROM segments s JOIN collections c ON c.id = s.collection "
            "WHERE c.name = ? AND s.scope = 'VECTOR'",
            (partition_name(GROUP, f"s{session}"),),
        ).fetchone()
    return chroma / segment


def slack(folder: Path) -> bytes:
    _, _, _, count, per_element = HEADER.unpack_from((folder / "header.bin").read_bytes())
    return (folder / "data_level0.bin").read_bytes()[count * per_element :]


def stamps(folder: Path) -> list[int]:
    return [(folder / name).stat().st_mtime_ns for name in ("data_level0.bin", "length.bin", "header.bin")]


def test_a_restart_zeroes_the_indexes_saved_since_and_rewrites_no_other(tmp_path: Path) -> None:
    connection = open_connection(data_dir=tmp_path, host=None, port=0, recycle_after=1000)
    chroma = tmp_path / PARTITIONS_FOLDER  # the partitions' engine (memory.store.connection)
    try:
        store = open_store(connection, model_id="test-model")
        for session in range(4):
            store.vectors.upsert(GROUP, f"s{session}", records(session))
        connection.recycle_after = 1
        assert connection.restart()  # the first restart of the process zeroes every saved index
        folders = {session: index_folder(chroma, session) for session in range(4)}
        assert all(slack(folder) and not any(slack(folder)) for folder in folders.values())
        before = {session: stamps(folder) for session, folder in folders.items()}

        # What a running engine's save from uninitialised buffers leaves: bytes in the slack of s0 (which
        # the engine opens below) and of s3 (which it does not).
        for session in (0, 3):
            planted = folders[session] / "data_level0.bin"
            with planted.open("r+b") as file:
                file.seek(planted.stat().st_size - 64)
                file.write(b"deleted text left in a buffer".ljust(64, b"!"))
            assert any(slack(folders[session]))
        planted_s3 = stamps(folders[3])

        restarts = connection.restarts
        store.vectors.records(GROUP, ids=["s0-r0"], selection=RecordFilter(session_ids=("s0",)))  # opens s0
        store.vectors.upsert(GROUP, "s2", records(2)[:1])  # s2 saved: two partitions touched, a restart follows
        assert connection.restarts >= restarts + 1

        # A restart looks only at the indexes of the collections the engine opened (it saves no other).
        assert not any(slack(folders[0]))  # zeroed again
        assert stamps(folders[1]) == before[1]  # neither opened nor planted: not rewritten
        assert stamps(folders[3]) == planted_s3  # not opened: not even looked at
        assert {record.id for record in store.vectors.records(GROUP)} == {
            f"s{session}-r{i}" for session in range(4) for i in range(5)
        }
    finally:
        close_embedded(tmp_path)
        release_folder(tmp_path)
    assert not any(slack(folders[3]))  # a full stop (closing the folder) looks at every index
