"""Many partitions on a Chroma server: its open files follow its index cache, not the number of sessions.

A `chroma run` server keeps about four files open for every collection whose vector index it has loaded, and epimem
keeps a collection per session: left alone, a server needs an open-files limit of four per session it holds. With
Chroma's LRU index cache (docs/scaling.md) it keeps at most that many indexes loaded, so its open files stay near four
per cached index. Both halves are measured here on real servers, the second with epimem building a group of many
sessions under a limit far below four per session.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import chromadb
import pytest
from helpers.builders import T0
from helpers.servers import ChromaServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import Message

pytestmark = pytest.mark.slow

SESSIONS = 100
CACHE = 12
# Chroma 1.5.9 keeps up to about 64 indexes loaded whatever a smaller capacity says (measured: 64 at 960 collections
# touched with a capacity of 1 or 12; 189 with 200), four files each.
LOADED_FLOOR = 64
LIMIT = 340  # well under four files per session (~400 for this group), over 4 x LOADED_FLOOR and a server's own


def _touch_collections(server: ChromaServer, prefix: str, count: int) -> None:
    client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
    for index in range(count):
        collection = client.create_collection(f"{prefix}-{index}")
        collection.add(ids=["a"], embeddings=[[float(index), 1.0, 0.0]])


def test_a_server_keeps_files_open_per_loaded_index_unless_its_cache_is_bounded(tmp_path: Path) -> None:
    """The formula the docs give: four open files per loaded index; the cache bounds the loaded indexes."""
    touched = 100
    counts: dict[str, tuple[int, int]] = {}
    for name, cache in (("default", None), ("bounded", CACHE)):
        server = ChromaServer(tmp_path / name / "chroma", index_cache=cache)
        (tmp_path / name).mkdir()
        server.start()
        try:
            _touch_collections(server, "first", 1)
            before = server.open_file_count()
            _touch_collections(server, "touch", touched)
            counts[name] = (before, server.open_file_count())
        finally:
            server.stop()
    default_before, default_after = counts["default"]
    bounded_before, bounded_after = counts["bounded"]
    assert default_after - default_before >= 4 * touched, counts  # every touched index keeps its files open
    assert bounded_after - bounded_before <= 4 * max(CACHE, LOADED_FLOOR), counts  # only the cached ones do


def test_a_group_of_many_sessions_builds_and_answers_under_a_low_open_files_limit(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    server = ChromaServer(tmp_path / "chroma", index_cache=CACHE, open_files=LIMIT)
    server.start()
    group = f"many-{uuid.uuid4().hex[:8]}"
    try:
        settings = Settings(data_dir=tmp_path / "data", chroma_host="127.0.0.1", chroma_port=server.port)
        service = Epimem.from_settings(settings, background=False, embedder=embedder)
        try:
            for index in range(SESSIONS):
                when = T0 + timedelta(days=index)
                service.add_messages(
                    group,
                    f"s{index}",
                    [
                        Message(id=f"s{index}-0", content=f"We planted tree {index} by the river.", timestamp=when),
                        Message(id=f"s{index}-1", content=f"Tree {index} needs water every week.", timestamp=when),
                    ],
                )
            formed = service.flush_group(group)
            assert {episode.session_id for episode in formed} == {f"s{i}" for i in range(SESSIONS)}
            assert server.open_file_count() < LIMIT
            hits = service.search(group, "tree 7 by the river", k=5)
            assert hits and hits[0].episode.session_id == "s7"
            assert service.vector_count(group) >= 2 * SESSIONS
        finally:
            service.close()
    finally:
        server.stop()
