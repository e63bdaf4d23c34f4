"""Read snapshots kept on disk between two runs (memory.readmodel.files, embedded Chroma): a
snapshot loaded at the next start reads exactly like one built from Chroma (full and columns-only, its
keyword index restored); a file is never used once the group was written after it (the first write takes
its snapshot, then scrubs it), nor one a process left behind without closing, nor one that does not match the
group; a delete scrubs the file at once, so no deleted text stays in it. On a Chroma server nothing is kept on disk."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.builders import messages
from helpers.checks import answers, by_record, keyword_scores
from test_snapshot_patches import QUERIES

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.engine.folder_lock import release_folder
from memory.models import GroupConfiguration
from memory.readmodel.files import CLAIMED, FOLDER, file_name
from memory.readmodel.model import ReadModel
from memory.store.connection import close_embedded, open_connection
from memory.store.factory import open_store
from memory.store.vectors import VectorStore
from retrieval.keyword import KeywordIndex, keyword_index

# Restarts of the embedded engine in every test: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

GROUP = "files"
MARKER = "zqmarkerquokka"


@pytest.fixture
def start(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[Callable[..., Epimem]]:
    """``start(tier="full")``: a service on one embedded folder as a new process would open it (the last
    one closed, its engine stopped: this process's write counters start again from zero); "vectors": past
    the full bound, the vectors and messages kept (episodes read from Chroma); "columns-only": episodes,
    vectors and messages read from Chroma per request."""
    running: list[Epimem] = []
    folder = tmp_path / "data"

    def make(*, tier: str = "full") -> Epimem:
        for service in running:
            service.close()
        running.clear()
        close_embedded(folder)
        running.append(Epimem.from_settings(Settings(data_dir=folder), background=False, embedder=embedder))
        read_model = running[0].read_model
        if tier != "full":
            read_model.full_group_bytes = 0
        if tier == "columns-only":
            read_model.vector_group_bytes = 0
        return running[0]

    yield make
    for service in running:
        service.close()
    close_embedded(folder)


def seed(service: Epimem) -> None:
    service.add_messages(GROUP, "s1", messages(6, prefix="a"))
    service.flush(GROUP, "s1")
    service.add_messages(GROUP, "s2", messages(4, prefix="b", text="Turn {i}: a pottery class on Thursday."))
    service.add_messages(GROUP, "s2", [{"id": "secret", "content": f"The code word is {MARKER}."}])
    service.flush(GROUP, "s2")
    service.add_messages(GROUP, "s3", messages(2, prefix="c", text="Turn {i}: still pending about the lake."))


def reads(service: Epimem) -> list[Any]:
    return answers(service, GROUP, QUERIES)


def chroma_episode_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many episodes each read of episodes from Chroma asks for, from now on."""
    asked: list[int] = []
    read = VectorStore.episodes

    def episodes(store: VectorStore, group_id: str, **how: Any) -> list[Any]:
        asked.append(len(how.get("ids") or ()))
        return read(store, group_id, **how)

    monkeypatch.setattr(VectorStore, "episodes", episodes)
    return asked


def assert_equals_a_fresh_build(service: Epimem) -> None:
    store = service.memory.store
    kept = service.read_model.snapshot(GROUP, fresh=True)
    reader = service.read_model.reader(GROUP)
    scratch = ReadModel(open_store(store.connection, model_id=store.model_id))  # its own, read from Chroma
    scratch.full_group_bytes = service.read_model.full_group_bytes
    scratch.vector_group_bytes = service.read_model.vector_group_bytes
    fresh = scratch.snapshot(GROUP)
    assert by_record(kept) == by_record(fresh)
    assert list(kept.ids) == list(fresh.ids)  # the stored order too
    assert kept.full == fresh.full and (kept.directions is None) == (fresh.directions is None)
    assert (kept.messages or {}) == (fresh.messages or {})
    assert (kept.config, kept.sessions) == (fresh.config, fresh.sessions)
    assert reader.columns is kept
    index, built = keyword_index(reader), KeywordIndex(fresh)
    for query in QUERIES:
        ours, theirs = keyword_scores(index, kept, query), keyword_scores(built, fresh, query)
        assert np.array_equal([ours[r] for r in theirs], list(theirs.values())), query


@pytest.mark.parametrize("tier", ["full", "vectors", "columns-only"])
def test_a_snapshot_loaded_at_start_reads_like_one_built_from_chroma(
    start: Callable[..., Epimem], tier: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = start(tier=tier)
    seed(service)
    expected = reads(service)
    service = start(tier=tier)  # the last run kept its snapshot
    episode_reads = chroma_episode_reads(monkeypatch)
    assert reads(service) == expected
    # A snapshot that keeps the vectors keeps the episodes' metadata too: no request reads an episode from Chroma.
    assert (episode_reads == []) == (tier != "columns-only")
    cache = service.stats().read_cache
    assert cache is not None and cache.loads == 1 and cache.full_groups == int(tier == "full")
    assert (service.read_model.snapshot(GROUP).directions is None) == (tier == "columns-only")
    assert_equals_a_fresh_build(service)


@pytest.mark.parametrize("tier", ["full", "columns-only"])
def test_the_first_write_after_a_start_keeps_the_files_snapshot_not_the_file(
    start: Callable[..., Epimem], tmp_path: Path, tier: str
) -> None:
    service = start(tier=tier)
    seed(service)
    reads(service)
    service = start(tier=tier)
    kept = tmp_path / "data" / CLAIMED / file_name(GROUP)
    assert kept.is_file()
    service.add_messages(GROUP, "s1", [{"id": "late", "content": "A late word about the velodrome."}])
    assert not kept.exists()  # the write scrubbed it before it was counted...
    cache = service.stats().read_cache
    assert cache is not None and cache.loads == 1 and cache.groups == 1  # ...having taken its snapshot first
    assert "velodrome" in service.context(GROUP, "velodrome", token_budget=300).text  # the write patched in
    assert service.stats().read_cache.extensions >= 1  # type: ignore[union-attr]
    assert_equals_a_fresh_build(service)
    service = start(tier=tier)  # kept at close, with the late word
    assert "velodrome" in service.context(GROUP, "velodrome", token_budget=300).text
    cache = service.stats().read_cache
    assert cache is not None and cache.loads == 1


def test_a_delete_as_the_first_write_after_a_start_leaves_nothing_of_it(
    start: Callable[..., Epimem], tmp_path: Path
) -> None:
    service = start()
    seed(service)
    reads(service)
    service = start()
    service.delete_message(GROUP, "s2", "secret")
    assert not [p for p in scan(tmp_path / "data") if "read-snapshots" in p]
    kept = service.read_model.cached(GROUP)
    assert kept is not None and MARKER not in str(by_record(kept))  # the taken snapshot was patched at once
    assert MARKER not in service.context(GROUP, MARKER, token_budget=300).text
    assert_equals_a_fresh_build(service)


def test_files_left_by_a_process_that_did_not_close_are_never_used(
    start: Callable[..., Epimem], tmp_path: Path
) -> None:
    folder = tmp_path / "data"
    service = start()
    seed(service)
    reads(service)
    service = start()
    kept = folder / CLAIMED / file_name(GROUP)
    old = tmp_path / "old.snap"
    shutil.copy(kept, old)
    service.delete_session(GROUP, "s3")
    service.add_messages(GROUP, "s4", [{"id": "new", "content": "A new word about the velodrome."}])
    # A crash between a write and its scrub: the old file still claimed, and the claim never given back.
    shutil.copy(old, kept)
    service.read_model._files = None
    service = start()
    assert not kept.exists() and not (folder / FOLDER).exists()  # scrubbed by the claim of this start
    assert "velodrome" in service.context(GROUP, "velodrome", token_budget=300).text
    assert "still pending" not in service.context(GROUP, "pending lake", token_budget=300).text
    cache = service.stats().read_cache
    assert cache is not None and cache.loads == 0
    assert_equals_a_fresh_build(service)


def test_a_write_made_before_the_read_model_opened_scrubs_the_kept_file(
    start: Callable[..., Epimem], tmp_path: Path
) -> None:
    """The kept files hear of writes from the moment the process's first read model opens on the connection;
    a group the process wrote before then has its file scrubbed at that moment, not loaded stale."""
    folder = tmp_path / "data"
    service = start()
    seed(service)
    reads(service)
    model_id = service.memory.store.model_id
    service.close()
    close_embedded(folder)
    assert (folder / FOLDER / file_name(GROUP)).is_file()
    store = open_store(open_connection(data_dir=folder, host=None, port=0), model_id=model_id)
    try:
        store.log.put_group_config(GroupConfiguration(group_id=GROUP, description="written before"))
        read_model = ReadModel(store, persist=True)
        assert not (folder / CLAIMED / file_name(GROUP)).exists()
        snapshot = read_model.snapshot(GROUP)
        assert snapshot.config is not None and snapshot.config.description == "written before"
        assert read_model.stats().loads == 0
        read_model.close()
    finally:
        release_folder(folder)
        close_embedded(folder)


def test_a_file_that_does_not_match_the_group_is_not_used(start: Callable[..., Epimem], tmp_path: Path) -> None:
    """A file put back by hand (a process that did not follow the protocol): its record count differs."""
    folder = tmp_path / "data"
    service = start()
    seed(service)
    reads(service)
    service = start()
    old = tmp_path / "old.snap"
    shutil.copy(folder / CLAIMED / file_name(GROUP), old)
    service.add_messages(GROUP, "s4", [{"id": "new", "content": "A new word about the velodrome."}])
    service.read_model.forget()  # nothing kept at close
    service.close()
    shutil.copy(old, folder / FOLDER / file_name(GROUP))
    service = start()
    assert "velodrome" in service.context(GROUP, "velodrome", token_budget=300).text
    cache = service.stats().read_cache
    assert cache is not None and cache.loads == 0


def scan(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes()]


def test_a_delete_scrubs_the_file_at_once(start: Callable[..., Epimem], tmp_path: Path) -> None:
    folder = tmp_path / "data"
    service = start()
    seed(service)
    reads(service)
    service.close()
    assert scan(folder / FOLDER)  # the test can fail: the kept snapshot holds the text
    service = start()
    assert MARKER in service.context(GROUP, MARKER, token_budget=300).text  # loaded from the file
    service.delete_message(GROUP, "s2", "secret")
    assert not [p for p in scan(folder) if "read-snapshots" in p]
    service = start()
    assert MARKER not in service.context(GROUP, MARKER, token_budget=300).text
    assert not [p for p in scan(folder) if "read-snapshots" in p]
    gone = "zqsessiongone"  # a deleted session's id is not kept either
    service.add_messages(GROUP, gone, [{"id": "q", "content": "A short-lived session about kites."}])
    assert "kites" in service.context(GROUP, "kites", token_budget=300).text
    service.delete_session(GROUP, gone)
    assert "kites" not in service.context(GROUP, "kites", token_budget=300).text
    service.close()
    kept = [p.read_bytes() for p in (folder / FOLDER).iterdir()]
    assert kept and not [data for data in kept if gone.encode() in data]
    service = start()
    service.delete_group(GROUP)
    service.close()
    assert not list((folder / FOLDER).iterdir())


def test_nothing_is_kept_on_disk_with_a_chroma_server(chroma_server: Any, tmp_path: Path, embedder: Any) -> None:
    settings = Settings(data_dir=tmp_path / "data", chroma_host="127.0.0.1", chroma_port=chroma_server.port)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    try:
        seed(service)
        reads(service)
    finally:
        service.close()
    assert not (tmp_path / "data" / FOLDER).exists() and not (tmp_path / "data" / CLAIMED).exists()


def fill(service: Epimem, group_id: str, adds: int) -> None:
    """Writes only, more of them than the change feed keeps (the tests shrink it): a fill, an import."""
    for number in range(adds):
        session = f"s{number // 5}"
        service.add_messages(group_id, session, [{"id": f"m{number}", "content": f"Fill line {number} on kites."}])
        if number % 5 == 4:
            service.flush(group_id, session)


@pytest.fixture
def short_journal(monkeypatch: pytest.MonkeyPatch) -> int:
    """The change feed keeps 16 writes a group (512 in a server), followed every 8: a fill of a few dozen
    adds outruns it as one of thousands outruns the real one."""
    monkeypatch.setattr("memory.store.changes.JOURNAL", 16)
    monkeypatch.setattr("memory.readmodel.follow.JOURNAL", 16)
    return 16


def test_a_group_that_was_only_written_is_kept_at_close(
    start: Callable[..., Epimem], tmp_path: Path, short_journal: int
) -> None:
    """A server that only wrote a group keeps its snapshot current (patched as the writes go, never read by a
    request) and keeps it at close: the next start loads it instead of reading the group from Chroma."""
    service = start()
    fill(service, GROUP, 40)
    assert service.memory.store.connection.feed.version(GROUP) > 2 * short_journal  # the feed lost writes
    assert service.read_model.wait_followed(60)
    cache = service.stats().read_cache
    assert cache is not None and cache.groups == 1 and cache.extensions >= 1  # built once, then patched
    service.close()
    assert (tmp_path / "data" / FOLDER / file_name(GROUP)).is_file()
    service = start()
    assert "Fill line 39" in service.context(GROUP, "Fill line 39 on kites", token_budget=300).text
    cache = service.stats().read_cache
    assert cache is not None and cache.loads == 1
    assert_equals_a_fresh_build(service)


def test_a_group_only_written_never_pushes_out_a_group_that_is_read(
    start: Callable[..., Epimem], short_journal: int
) -> None:
    service = start()
    service.read_model.max_groups = 1
    seed(service)
    reads(service)
    fill(service, "written-only", 40)
    assert service.read_model.wait_followed(60)
    assert service.read_model.groups() == [GROUP]
