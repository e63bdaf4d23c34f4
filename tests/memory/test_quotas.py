"""Chroma Cloud's quotas kept on every call (memory.store.bounded, memory.store.paging): reads and writes of many
records in pages and batches, listings that stay whole while records are deleted under them, calls in flight
bounded per collection, ids no record can have never sent; and the cloud profile itself (it fails a call of
epimem's code over a limit)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import numpy as np
import pytest
from helpers import cloud_profile

from api.facade import Epimem
from memory.store.bounded import BoundedCollection, CollectionSlots
from memory.store.paging import PAGE, list_ids


def raw_collection(service: Epimem, records: int) -> Any:
    """A collection of ``records`` small records, written straight to Chroma by the test."""
    name = f"quota-{uuid.uuid4().hex[:10]}"
    client = service.memory.store.connection.client
    collection = client.create_collection(name, embedding_function=None)
    for start in range(0, records, 250):
        ids = [f"r{i:05d}" for i in range(start, min(start + 250, records))]
        collection.add(ids=ids, embeddings=np.ones((len(ids), 2)), metadatas=[{"n": int(i[1:])} for i in ids])
    return collection


def test_reads_and_writes_of_many_records_go_in_pages_and_batches(service: Epimem) -> None:
    chroma = raw_collection(service, 0)
    bounded = BoundedCollection(chroma, CollectionSlots())
    ids = [f"r{i:05d}" for i in range(1000)]
    bounded.upsert(ids=ids, embeddings=np.ones((1000, 2)), metadatas=[{"n": i} for i in range(1000)])
    assert chroma.count() == 1000
    found = bounded.get(ids=ids[::-1], include=["metadatas"])
    assert sorted(found["ids"]) == ids and {m["n"] for m in found["metadatas"]} == set(range(1000))
    assert sorted(bounded.get(where={"n": {"$gte": 100}}, include=[])["ids"]) == ids[100:]
    everything = bounded.get(include=["embeddings"])
    assert len(everything["ids"]) == 1000 and np.asarray(everything["embeddings"]).shape == (1000, 2)
    bounded.update(ids=ids, metadatas=[{"n": -1}] * 1000)
    assert bounded.get(where={"n": -1}, include=[])["ids"] and len(bounded.list_ids({"n": -1})) == 1000
    bounded.delete(ids[:700])
    assert sorted(bounded.list_ids()) == ids[700:]


def test_ids_no_record_can_have_are_never_sent(service: Epimem) -> None:
    bounded = BoundedCollection(raw_collection(service, 3), CollectionSlots())
    long_id = "x" * 129
    assert bounded.get(ids=[long_id], include=["metadatas"]) == {
        "ids": [],
        "included": ["metadatas"],
        "embeddings": None,
        "documents": None,
        "metadatas": [],
    }
    assert bounded.get(ids=[long_id, "r00001"], include=[])["ids"] == ["r00001"]
    bounded.update(ids=[long_id, "r00001"], metadatas=[{"n": 7}, {"n": 8}])
    assert bounded.get(ids=["r00001"], include=["metadatas"])["metadatas"] == [{"n": 8}]
    bounded.delete([long_id])
    with pytest.raises(ValueError, match="at most 128 bytes"):
        bounded.add(ids=[long_id], embeddings=np.ones((1, 2)), metadatas=[{"n": 1}])


class DeletingUnderTheListing:
    """A real collection whose ``get`` deletes records before the cursor once, between two pages of a listing
    (what another request's delete does to a listing in flight)."""

    def __init__(self, collection: Any, victims: list[str]) -> None:
        self.collection, self.victims, self.name = collection, victims, collection.name
        self.pages = 0

    def get(self, **arguments: Any) -> Any:
        self.pages += 1
        if self.pages == 3 and self.victims:
            self.collection.delete(ids=self.victims)
            self.victims = []
        return self.collection.get(**arguments)


def test_a_listing_stays_whole_while_records_before_its_cursor_are_deleted(service: Epimem) -> None:
    chroma = raw_collection(service, 1000)
    doomed = [f"r{i:05d}" for i in (3, 10, 250)]  # all on the first page
    shifting = DeletingUnderTheListing(chroma, doomed)
    found = list_ids(shifting)
    assert sorted(found) == sorted(f"r{i:05d}" for i in range(1000) if f"r{i:05d}" not in doomed)
    assert shifting.pages > 1000 // PAGE + 2  # it noticed, and listed again

    # without the overlap of one page with the next, the same delete loses records that were there throughout
    chroma_again = raw_collection(service, 1000)
    naive = DeletingUnderTheListing(chroma_again, doomed)
    listed: list[str] = []
    while True:
        page = naive.get(limit=PAGE, offset=len(listed), include=[])["ids"]
        listed += page
        if len(page) < PAGE:
            break
    there_throughout = {f"r{i:05d}" for i in range(1000)} - set(doomed)
    assert there_throughout - set(listed)


def test_calls_in_flight_are_bounded_per_collection(service: Epimem) -> None:
    """Six readers of one collection with room for two: two reach Chroma, the others wait for a slot; a reader
    of another collection does not wait."""
    chroma = raw_collection(service, 5)
    inside: list[int] = []
    most = [0]
    lock = threading.Lock()
    release = threading.Event()

    class Held:
        """The real collection, each read held open until the test lets it go."""

        name = chroma.name

        def get(self, **arguments: Any) -> Any:
            with lock:
                inside.append(1)
                most[0] = max(most[0], len(inside))
            release.wait(timeout=60)
            try:
                return chroma.get(**arguments)
            finally:
                with lock:
                    inside.pop()

    slots = CollectionSlots(reads=2, writes=2)
    bounded = BoundedCollection(Held(), slots)
    readers = [threading.Thread(target=lambda: bounded.get(ids=["r00001"], include=[])) for _ in range(6)]
    for reader in readers:
        reader.start()
    deadline = threading.Event()
    for _ in range(6000):  # until two reads are in Chroma and the four others hold their place in line
        with lock:
            ready = len(inside) == 2 and slots.users(chroma.name) == 6
        if ready:
            break
        deadline.wait(0.01)
    assert ready
    other = BoundedCollection(raw_collection(service, 1), slots)
    assert other.get(ids=["r00000"], include=[])["ids"] == ["r00000"]  # not held up by the first collection
    release.set()
    for reader in readers:
        reader.join(timeout=60)
    assert most[0] == 2 and not inside and slots.in_use() == 0


def test_the_cloud_profile_fails_a_call_of_epimem_over_a_limit(service: Epimem) -> None:
    """A call made from epimem's code (here, a function compiled as a module of ``memory``) over a limit raises
    and is kept; the same call made by a test is only counted."""
    if not cloud_profile._installed:
        pytest.skip("the cloud profile is off (EPIMEM_CLOUD_PROFILE=0)")
    chroma = raw_collection(service, 2)
    chroma.get(include=[])  # the test's own read of everything: counted, not checked
    scope: dict[str, Any] = {"__name__": "memory.store.pretend"}
    exec("def read_all(collection):\n    return collection.get(include=[])\n", scope)  # noqa: S102
    kept = len(cloud_profile.TALLY.exceeded)
    with pytest.raises(cloud_profile.QuotaExceeded, match="without a limit"):
        scope["read_all"](chroma)
    assert len(cloud_profile.TALLY.exceeded) == kept + 1
    cloud_profile.TALLY.exceeded.pop()  # expected here: not a failure of the run
    assert cloud_profile.problems("upsert", {"ids": [f"{i}" for i in range(301)]})
    assert cloud_profile.problems("add", {"ids": ["a"], "documents": ["é" * 8200]})
    assert cloud_profile.problems("add", {"ids": ["a"], "metadatas": [{"k": "x" * 4097}]})
    assert cloud_profile.problems("add", {"ids": ["a"], "metadatas": [{f"k{i}": i for i in range(33)}]})
    assert cloud_profile.problems("get", {"ids": ["a" * 129]})
    assert cloud_profile.problems("query", {"n_results": 301})
    assert cloud_profile.problems("get", {"limit": 10, "where": {"$and": [{f"k{i}": i} for i in range(9)]}})
    assert not cloud_profile.problems("get", {"limit": 300, "where": {"$and": [{f"k{i}": i} for i in range(8)]}})


WHERES = [
    {"kind": "message"},
    {"kind": {"$in": ["episode", "summary"]}},
    {"ts": {"$gte": 20.0}},
    {"ts": {"$lt": 20}},
    {"ts": {"$lte": 20.0}},
    {"$and": [{"kind": "message"}, {"session_id": {"$in": ["s1", "s3"]}}, {"ts": {"$lt": 35.0}}]},
    {"flag": True},
    {"n": 7},
    {"session_id": "s2"},
]


def test_a_read_by_ids_with_a_filter_keeps_what_chroma_would(service: Epimem) -> None:
    """The filter of a read by id is applied to the records read (memory.store.where), not sent to Chroma, which
    walks every record of its database for it: the same records as Chroma's own evaluation, for every operator
    epimem writes, with records that lack a field or hold another type."""
    name = f"where-{uuid.uuid4().hex[:10]}"
    chroma = service.memory.store.connection.client.create_collection(name, embedding_function=None)
    kinds = ["message", "episode", "summary"]
    metadatas: list[dict[str, Any]] = []
    for i in range(60):
        metadata: dict[str, Any] = {"kind": kinds[i % 3], "session_id": f"s{i % 4}", "n": i % 9}
        if i % 5:
            metadata["ts"] = float(i) if i % 2 else i  # floats and ints
        if i % 7 == 0:
            metadata["flag"] = i % 2 == 0
        if i % 11 == 0:
            metadata["kind"] = 3  # another type than the clause's
        metadatas.append(metadata)
    ids = [f"r{i:03d}" for i in range(60)]
    chroma.add(ids=ids, embeddings=np.arange(120, dtype=float).reshape(60, 2), metadatas=metadatas, documents=ids)
    bounded = BoundedCollection(chroma, CollectionSlots())
    asked = ids[5:50:2] + ["r999"]
    for where in WHERES:
        expected = chroma.get(ids=asked, where=where, include=["documents", "embeddings"])  # Chroma's evaluation
        found = bounded.get(ids=asked, where=where, include=["documents", "embeddings"])
        assert found["ids"] == expected["ids"], where
        assert found["documents"] == expected["documents"] and found["metadatas"] is None
        assert np.array_equal(np.asarray(found["embeddings"]), np.asarray(expected["embeddings"]))
        with_metadata = bounded.get(ids=asked, where=where, include=["metadatas"])
        assert with_metadata["metadatas"] == chroma.get(ids=asked, where=where, include=["metadatas"])["metadatas"]
