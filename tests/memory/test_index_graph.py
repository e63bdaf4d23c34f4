"""The group index is built with a shorter HNSW candidate list than Chroma's default (a cheaper insert,
memory.store.codec.INDEX_CONSTRUCTION_EF); partitions keep the default, and an index created before keeps
its own graph and stays readable and writable. Both Chroma backends."""

from __future__ import annotations

import numpy as np

from api.facade import Epimem
from memory.store import codec
from memory.store.records import RecordFilter, VectorRecord

CHROMA_DEFAULT_EF = 100


def records(session: str, count: int, seed: int) -> list[VectorRecord]:
    vectors = np.random.default_rng(seed).standard_normal((count, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        VectorRecord(f"{session}-{i}", f"record {i} of {session}", {"kind": "episode", "session_id": session}, v)
        for i, v in enumerate(vectors)
    ]


def construction_ef(service: Epimem, name: str) -> int:
    collection = service.memory.store.connection.client_for(name).get_collection(name, embedding_function=None)
    return int((collection.configuration or {})["hnsw"]["ef_construction"])


def test_a_new_group_index_gets_the_cheaper_graph_and_partitions_the_default(service: Epimem, group_id: str) -> None:
    written = records("s1", 5, seed=1)
    service.memory.store.vectors.upsert(group_id, "s1", written)
    assert construction_ef(service, codec.index_name(group_id)) == codec.INDEX_CONSTRUCTION_EF
    assert construction_ef(service, codec.partition_name(group_id, "s1")) == CHROMA_DEFAULT_EF
    nearest = service.memory.store.vectors.nearest(group_id, written[3].embedding, k=1)
    assert nearest[0][0] == "s1-3"


def test_an_index_created_before_keeps_its_graph_and_takes_new_records(service: Epimem, group_id: str) -> None:
    store = service.memory.store
    name = codec.index_name(group_id)
    older = codec.vector_collection_metadata("index", group_id, None, store.model_id)
    del older["hnsw:construction_ef"]  # what every index created before this setting holds
    before = records("s1", 4, seed=2)
    client = store.connection.client_for(name)
    client.get_or_create_collection(name, metadata=older, embedding_function=None).upsert(
        ids=[r.id for r in before],
        embeddings=np.stack([r.embedding for r in before]),  # type: ignore[misc]
        documents=[r.document for r in before],
        metadatas=[r.metadata for r in before],  # type: ignore[misc]
    )
    after = records("s2", 3, seed=3)
    store.vectors.upsert(group_id, "s2", after)
    assert construction_ef(service, name) == CHROMA_DEFAULT_EF
    kept = client.get_collection(name, embedding_function=None).metadata or {}
    assert "hnsw:construction_ef" not in kept and kept["epimem"] == "index"
    everything = store.vectors.records(group_id, selection=RecordFilter())
    assert sorted(r.id for r in everything) == sorted(r.id for r in before + after)
    for record in before + after:
        assert store.vectors.nearest(group_id, record.embedding, k=1)[0][0] == record.id  # type: ignore[arg-type]
