"""The Chroma store: names, persistence of metadata records, model identity."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.errors import ModelMismatchError, ModelNotFoundError
from memory.models import GroupConfiguration, SessionInfo
from memory.store.codec import index_name, log_name, partition_name
from memory.store.factory import open_store
from memory.store.records import RecordFilter

VALID_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]$")


@given(st.text(min_size=1, max_size=500), st.text(min_size=1, max_size=500))
def test_any_ids_give_valid_collection_names(group_id: str, session_id: str) -> None:
    for name in (partition_name(group_id, session_id), log_name(group_id), index_name(group_id)):
        assert VALID_NAME.match(name)


def test_names_do_not_collide_on_concatenation() -> None:
    assert partition_name("ab", "c") != partition_name("a", "bc")
    assert partition_name("g", "s") != partition_name("s", "g")
    assert log_name("g") != index_name("g")


def test_session_info_and_group_configuration_persist(make_service, group_id: str) -> None:
    first = make_service()
    first.put_group(GroupConfiguration(group_id=group_id, description="team memory", metadata={"tier": 2}))
    first.put_session(SessionInfo(group_id=group_id, session_id="s1", title="kick-off", user_ids=("ana",)))
    first.close()
    second = make_service()
    assert second.get_group(group_id).description == "team memory"
    assert second.get_group(group_id).metadata == {"tier": 2}
    info = second.get_session(group_id, "s1")
    assert info.title == "kick-off" and info.user_ids == ("ana",)
    assert [s.session_id for s in second.list_sessions(group_id)] == ["s1"]


def test_opening_a_partition_with_another_model_is_refused(service: Epimem, group_id: str) -> None:
    service.add_messages(group_id, "s1", [{"id": "1", "content": "hello there", "timestamp": "2023-01-01"}])
    service.flush(group_id, "s1")
    other = open_store(service.memory.store.connection, model_id="another-model:384:abc")
    with pytest.raises(ModelMismatchError) as error:
        other.vectors.query(
            group_id, service.embedder.embed_query("hello"), k=1, selection=RecordFilter(session_ids=("s1",))
        )
    assert error.value.status_code == 409 and "reembed" in error.value.message


def test_a_missing_embedding_model_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError) as error:
        SentenceTransformerEmbedder(model=str(tmp_path / "no-such-model"))
    assert "never downloads" in error.value.message


def test_bundled_model_gives_normalised_vectors_like_upstream(embedder: SentenceTransformerEmbedder) -> None:
    vectors = embedder.embed_batch(["A man is eating food.", "A man is eating a piece of bread."])
    assert vectors.shape == (2, 384)
    assert abs(float((vectors**2).sum(axis=1)[0]) - 1.0) < 1e-4
    assert float(vectors[0] @ vectors[1]) == pytest.approx(0.755, abs=0.01)
    assert embedder.model_id.startswith("all-MiniLM-L6-v2:384:")


def test_embeddings_by_id_are_the_stored_vectors_and_nothing_else(service: Epimem, group_id: str) -> None:
    texts = ["Ana adopted a puppy named Rex.", "Ben ran the charity race.", "They met at the lake."]
    service.add_messages(group_id, "s", [{"id": str(i), "content": text} for i, text in enumerate(texts)])
    service.flush(group_id, "s")
    vectors = service.memory.store.vectors
    stored = {r.id: r.embedding for r in vectors.records(group_id, embeddings=True)}
    assert len(stored) >= 4  # three messages and their episode
    wanted = [*stored, "no-such-record"]
    found = vectors.embeddings(group_id, wanted)
    assert found.keys() == stored.keys()
    for record_id, vector in found.items():
        assert vector.dtype.name == "float32" and vector.tolist() == stored[record_id].tolist()
    assert vectors.embeddings(group_id, []) == {} and vectors.embeddings("no-such-group", wanted) == {}
