"""An index on embedded Chroma's write log, so that opening a collection does not read all of it.

chromadb 1.5.9 keeps every write in the table ``embeddings_queue`` of ``chroma.sqlite3`` until the
collection's vector index is saved (after 1,000 writes: a session's partition holds ~20, so its rows
stay for good). Whenever the engine opens a collection (its first write, its first use after a
restart) it pulls that collection's rows with ``WHERE topic = ? AND seq_id > ? ORDER BY seq_id``,
and the table has no index on ``topic``: SQLite reads the whole table, every record of every
partition. Measured: 31-40 ms of CPU per new partition at 71,000 rows (3,600 partitions of 20),
linear in the rows; with an index on ``(topic, seq_id)`` the same query reads the collection's rows
only (0.005 ms).

The index is created while the folder's engine is stopped (before the process first starts it, and
at every stop: a new folder's database only exists once its engine has run); SQLite keeps it up to
date on every write, and erasure's vacuum keeps it. It holds collection ids and sequence numbers,
no record content. Chroma never names it; a Chroma version that rebuilt the table would drop it,
and the next stop creates it again.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from memory.engine.erasure import DATABASE

INDEX = "epimem_embeddings_queue_topic"


def index_write_log(folder: Path) -> bool:
    """Create the index in the folder's database if missing; False where there is no write log (yet)."""
    database = Path(folder) / DATABASE
    if not database.exists():
        return False
    with closing(sqlite3.connect(database, timeout=60)) as db:
        try:
            db.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON embeddings_queue (topic, seq_id)")
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return False
            raise
    return True
