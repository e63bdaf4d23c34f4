"""The read caches (memory.readmodel.model): a cached read never returns stale or deleted data, on
both backends, after this process's writes and after another server's (two services on one Chroma
server); the cached path gives exactly what the uncached one gives; memory stays bounded and is
reported."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import chromadb
import pytest

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.store import codec
from memory.store.versions import own_key
from retrieval.speaker_names import speaker_names

T0 = datetime(2023, 5, 1, 9, 0, tzinfo=UTC)
TALK = [
    ("Ana", "We adopted a grey kitten called Miso last weekend."),
    ("Ben", "Miso! What a lovely name for a kitten."),
    ("Ana", "She sleeps on the piano all afternoon."),
    ("Ben", "I finally booked the train to Lisbon for June."),
    ("Ana", "Lisbon in June sounds wonderful, bring me a tile."),
    ("Ben", "My marathon training starts on Monday."),
]


def chat(prefix: str, lines: list[tuple[str, str]], *, day: int = 0) -> list[dict[str, Any]]:
    start = T0 + timedelta(days=day)
    return [
        {
            "id": f"{prefix}{i}",
            "content": text,
            "producer_id": who,
            "timestamp": (start + timedelta(minutes=i)).isoformat(),
        }
        for i, (who, text) in enumerate(lines)
    ]


def seed(service: Epimem, group_id: str) -> None:
    service.add_messages(group_id, "s1", chat("a", TALK[:3]))
    service.flush(group_id, "s1")
    service.add_messages(group_id, "s2", chat("b", TALK[3:], day=3))
    service.flush(group_id, "s2")


def cited(service: Epimem, group_id: str, query: str) -> set[str]:
    result = service.context(group_id, query, token_budget=400)
    return {m for citation in result.citations for m in citation.message_ids}


def found_text(service: Epimem, group_id: str, query: str) -> str:
    hits = service.search(group_id, query, k=10, expand=True)
    context = service.context(group_id, query, token_budget=400).text
    return context + "\n".join(m.content for hit in hits for m in hit.messages or [])


def on_server(chroma_server: Any, data_dir: Path, embedder: SentenceTransformerEmbedder, name: str) -> Epimem:
    """An epimem service of its own (``name``) on the shared Chroma server."""
    settings = Settings(data_dir=data_dir, chroma_host="127.0.0.1", chroma_port=chroma_server.port, node_id=name)
    return Epimem.from_settings(settings, background=False, embedder=embedder)


def test_cached_reads_equal_uncached_reads(make_service: Callable[..., Epimem], group_id: str) -> None:
    cached = make_service()
    seed(cached, group_id)
    uncached = cached.read_model
    queries = ["Who is Miso?", "When is the trip to Lisbon?", "marathon Monday", "piano"]
    expected = [(cached.context(group_id, q, token_budget=300), cached.search(group_id, q, k=5)) for q in queries]
    assert cached.read_model.snapshot(group_id).full
    # Past the full bound: the vectors and messages kept, the episodes read from Chroma; then columns only:
    # episodes, messages and vectors read from Chroma.
    for vector_group_bytes in (uncached.vector_group_bytes, 0):
        uncached.full_group_bytes, uncached.vector_group_bytes = 0, vector_group_bytes
        uncached.forget()
        snapshot = cached.read_model.snapshot(group_id)
        assert not snapshot.full and (snapshot.directions is not None) == (vector_group_bytes > 0)
        for query, (context, hits) in zip(queries, expected, strict=True):
            again = cached.context(group_id, query, token_budget=300)
            assert (again.text, again.citations) == (context.text, context.citations)
            assert [(h.episode.uuid, round(h.score, 9)) for h in cached.search(group_id, query, k=5)] == [
                (h.episode.uuid, round(h.score, 9)) for h in hits
            ]


def test_new_messages_are_seen_at_once(service: Epimem, group_id: str) -> None:
    seed(service, group_id)
    assert "c0" not in cited(service, group_id, "pottery class")
    builds = service.stats().read_cache.builds
    service.add_messages(group_id, "s3", chat("c", [("Ana", "I signed up for a pottery class on Thursdays.")]))
    service.flush(group_id, "s3")
    assert "c0" in cited(service, group_id, "pottery class")
    assert service.stats().read_cache.builds == builds + 1


@pytest.mark.slow
def test_deleted_data_never_comes_back(service: Epimem, group_id: str) -> None:
    seed(service, group_id)
    assert "Miso" in found_text(service, group_id, "kitten Miso")  # cached now
    service.delete_message(group_id, "s1", "a0")
    assert "grey kitten" not in found_text(service, group_id, "grey kitten Miso")
    service.delete_session(group_id, "s2")
    assert "Lisbon" not in found_text(service, group_id, "train to Lisbon")
    service.delete_group(group_id)
    assert service.search(group_id, "kitten") == []
    assert service.context(group_id, "kitten", token_budget=300).citations == []


def test_a_delete_then_an_add_of_as_many_records_is_seen(service: Epimem, group_id: str) -> None:
    """The group index count stays the same: only the version tells."""
    seed(service, group_id)
    count = service.vector_count(group_id)
    assert "Miso" in found_text(service, group_id, "kitten Miso")
    service.delete_session(group_id, "s1")
    service.add_messages(group_id, "s1", chat("z", [(w, t.replace("Miso", "Tofu")) for w, t in TALK[:3]]))
    service.flush(group_id, "s1")
    assert service.vector_count(group_id) == count
    text = found_text(service, group_id, "kitten")
    assert "Tofu" in text and "Miso" not in text


def test_speaker_names_follow_session_metadata(service: Epimem, group_id: str) -> None:
    from memory.models import SessionInfo

    seed(service, group_id)
    assert speaker_names(service.read_model.reader(group_id)).get("ana", set()) == set()
    service.put_session(
        SessionInfo(group_id=group_id, session_id="s1", metadata={"speakers": {"Ana": {"aliases": ["Annie"]}}})
    )
    assert speaker_names(service.read_model.reader(group_id))["ana"] == {"annie"}


def test_memory_is_bounded_by_the_settings_and_reported(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service(read_cache_mb=64, read_cache_groups=2)  # EPIMEM_READ_CACHE_MB, EPIMEM_READ_CACHE_GROUPS
    snapshots = service.read_model
    assert (snapshots.max_bytes, snapshots.max_groups) == (64 * 2**20, 2)
    groups = [f"{group_id}-{i}" for i in range(3)]
    for group in groups:
        service.add_messages(group, "s1", chat("a", TALK))
        service.flush(group, "s1")
        service.search(group, "kitten", k=3)
    stats = service.stats().read_cache
    assert stats is not None
    assert stats.groups == 2 and stats.evictions >= 1 and snapshots.groups() == groups[1:]
    assert 0 < stats.bytes <= stats.max_bytes == 64 * 2**20 and stats.records > 0 and stats.full_groups == 2
    snapshots.max_bytes = 1  # smaller than any group: only the one in use stays
    service.search(groups[0], "kitten", k=3)
    assert snapshots.groups() == [groups[0]]
    assert service.search(groups[2], "Lisbon", k=3)  # evicted groups are read again, correctly
    assert snapshots.groups() == [groups[2]]


@pytest.mark.slow
def test_writes_of_another_server_are_seen(
    chroma_server: Any, tmp_path: Path, embedder: SentenceTransformerEmbedder, group_id: str
) -> None:
    """Two services on one Chroma server: each sees the other's adds and deletes on its next request,
    whatever its cache holds (the shared stamp in the registry)."""

    one, two = (on_server(chroma_server, tmp_path / n, embedder, n) for n in ("one", "two"))
    try:
        seed(one, group_id)
        assert "Miso" in found_text(two, group_id, "kitten Miso")  # two caches the group
        one.add_messages(group_id, "s3", chat("c", [("Ana", "I signed up for a pottery class on Thursdays.")]))
        one.flush(group_id, "s3")
        assert "c0" in cited(two, group_id, "pottery class")
        one.delete_message(group_id, "s1", "a0")
        assert "grey kitten" not in found_text(two, group_id, "grey kitten Miso")
        # A delete and an add of as many records: the count alone would not tell.
        one.delete_session(group_id, "s2")
        one.add_messages(group_id, "s2", chat("d", [(w, t.replace("Lisbon", "Porto")) for w, t in TALK[3:]], day=3))
        one.flush(group_id, "s2")
        text = found_text(two, group_id, "train trip in June")
        assert "Porto" in text and "Lisbon" not in text
        one.delete_group(group_id)
        assert two.search(group_id, "kitten") == []
    finally:
        one.close()
        two.close()


def test_versions_move_with_every_write(service: Epimem, group_id: str) -> None:
    read_model = service.read_model
    seed(service, group_id)
    first = read_model.reader(group_id, fresh=True).version
    assert read_model.reader(group_id, fresh=True).version == first  # no write: the same snapshot
    service.delete_message(group_id, "s2", "b1")
    second = read_model.reader(group_id, fresh=True).version
    assert second != first
    if service.memory.store.connection.shared:
        assert second[1] != first[1] and second[1]  # the shared stamp moved too


@pytest.mark.slow
def test_each_write_stamps_through_one_registry_handle_opened_again_if_dropped(
    chroma_server: Any, tmp_path: Path, embedder: SentenceTransformerEmbedder, group_id: str
) -> None:
    """A process opens the registry once for its stamps (a round trip less per write); a registry dropped on the
    server since is opened again by the next write, which stamps as before."""
    service = on_server(chroma_server, tmp_path / "one", embedder, "one")
    raw = chromadb.HttpClient(host="127.0.0.1", port=chroma_server.port)
    try:
        seed(service, group_id)
        connection = service.memory.store.connection
        handle = connection.stamp_registry
        assert handle is not None
        service.add_messages(group_id, "s3", chat("r", [("Ana", "I bought a blue kayak for the lake.")]))
        assert connection.stamp_registry is handle  # opened once
        stamped = raw.get_collection(codec.REGISTRY).get(ids=[codec.registry_record_id(group_id)])
        assert own_key(connection.run_id) in (stamped["metadatas"] or [{}])[0]
        raw.delete_collection(codec.REGISTRY)
        service.add_messages(group_id, "s3", chat("k", [("Ana", "The kayak is called Otter.")], day=1))
        assert connection.stamp_registry is not handle
        stamped = raw.get_collection(codec.REGISTRY).get(
            ids=[codec.registry_record_id(group_id)], include=["metadatas"]
        )
        assert stamped["ids"] and own_key(connection.run_id) in (stamped["metadatas"] or [{}])[0]
    finally:
        service.close()


@pytest.mark.parametrize("wanted", [1, 3])
def test_session_scoped_reads_use_the_cache(service: Epimem, group_id: str, wanted: int) -> None:
    seed(service, group_id)
    hits = service.search(group_id, "Lisbon train", k=wanted, session_ids=["s2"])
    assert hits and all(hit.episode.session_id == "s2" for hit in hits)
    assert service.search(group_id, "Lisbon train", k=wanted, session_ids=["nope"]) == []


def test_own_writes_patch_the_snapshot(service: Epimem, group_id: str) -> None:
    """This process's writes are applied to its snapshot, on a Chroma server too (its own key in the
    group's stamp moved, no other)."""
    seed(service, group_id)
    snapshots = service.read_model
    assert "Miso" in found_text(service, group_id, "kitten Miso")
    before = snapshots.stats()
    service.add_messages(group_id, "s1", chat("n", [("Ana", "Miso learned to open the fridge door.")], day=1))
    assert "n0" in cited(service, group_id, "fridge door")
    after = snapshots.stats()
    assert after.extensions == before.extensions + 1 and after.builds == before.builds + 1


@pytest.mark.slow
def test_another_servers_write_is_read_again_not_patched(
    chroma_server: Any, tmp_path: Path, embedder: SentenceTransformerEmbedder, group_id: str
) -> None:
    one, two = (on_server(chroma_server, tmp_path / n, embedder, n) for n in ("one", "two"))
    try:
        seed(one, group_id)
        assert "Miso" in found_text(two, group_id, "kitten Miso")
        snapshots = two.read_model
        two.add_messages(group_id, "s1", chat("t", [("Ben", "The fridge door is now locked.")], day=1))
        one.add_messages(group_id, "s1", chat("o", [("Ana", "Miso found the fridge key.")], day=1))
        before = snapshots.stats()
        text = found_text(two, group_id, "fridge")
        assert "locked" in text and "fridge key" in text  # its own write and the other server's
        after = snapshots.stats()
        assert after.extensions == before.extensions and after.builds == before.builds + 1
    finally:
        one.close()
        two.close()


def test_a_group_past_the_full_bound_reads_no_message_or_vector_per_request(
    service: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the full bound a group keeps its vectors and messages (not its metadata): a search or a
    context reads neither from Chroma nor from the log, also right after a write (patched in)."""
    snapshots = service.read_model
    snapshots.full_group_bytes = 0
    seed(service, group_id)
    reads: list[str] = []
    for owner, name in (
        (type(service.memory.store.vectors), "embeddings"),
        (type(service.memory.store.log), "get_messages_of_sessions"),
    ):
        original = getattr(owner, name)

        def counted(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            reads.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    assert "Miso" in found_text(service, group_id, "kitten Miso")
    snapshot = service.read_model.snapshot(group_id)
    assert not snapshot.full and snapshot.directions is not None and snapshot.messages
    service.add_messages(group_id, "s1", chat("n", [("Ana", "Miso learned to open the fridge door.")], day=1))
    assert "n0" in cited(service, group_id, "fridge door")
    assert any(hit.episode.session_id == "s2" for hit in service.search(group_id, "train to Lisbon", k=3))
    assert reads == []
    assert snapshots.stats().extensions > 0


def test_a_replaced_snapshot_is_freed_without_the_garbage_collector(service: Epimem, group_id: str) -> None:
    """No cycle keeps a replaced snapshot (its keyword index holds it weakly): it goes when the cache lets
    go of it, not at the next collection, which walked the columns of every replaced one (pauses of ~100 ms
    every few writes to a big group)."""
    seed(service, group_id)
    assert "Miso" in found_text(service, group_id, "kitten Miso")  # the snapshot and its keyword index built
    gone = weakref.ref(service.read_model.snapshot(group_id))
    gc.disable()
    try:
        service.add_messages(group_id, "s1", chat("n", [("Ana", "Miso learned to open the fridge door.")], day=1))
        assert "n0" in cited(service, group_id, "fridge door")  # patched: the old one replaced
        assert gone() is None
    finally:
        gc.enable()
