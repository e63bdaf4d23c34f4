"""Export and import of a group (epimem JSON Lines v1): identical search after a restore, re-embedding
when the file names another model, idempotent import, whole-file validation before any write."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from helpers.builders import REFERENCE, T0, chat, two_episode_session

from api.facade import Epimem
from memory.errors import ConflictError, InvalidInputError, NotFoundError
from memory.models import MessageState

QUERIES = ["hiking at Lake Tahoe with the dog", "blue vase pottery", "kitten from the shelter", "Grand Canyon trip"]


def _fill(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=4)
    service.generate_summaries(group_id, days_back=60, max_memories_per_summary=3, reference_time=REFERENCE)
    service.add_messages(group_id, "s2", chat("s2-pending", 1, start=T0 + timedelta(days=9)))


def _results(service: Epimem, group_id: str) -> list[list[tuple[str, float]]]:
    # Scores to 1e-6: message evidence adds float32 cosines, whose last bits may differ after a restore.
    return [[(h.episode.uuid, round(h.score, 6)) for h in service.search(group_id, q, k=5)] for q in QUERIES]


def _state(service: Epimem, group_id: str) -> dict:
    history = {
        s.session_id: [
            (m.message, m.state, m.episode_id) for m in service.memory.store.log.list_messages(group_id, s.session_id)
        ]
        for s in service.list_sessions(group_id)
    }
    episodes = [e.model_copy(update={"group_id": "-"}) for e in service.timeline(group_id, limit=500).episodes]
    return {"history": history, "episodes": episodes, "vectors": service.vector_count(group_id)}


@pytest.mark.slow
def test_export_import_restores_identical_search(service: Epimem, make_service, tmp_path, group_id: str) -> None:
    _fill(service, group_id)
    lines = list(service.export_group(group_id, include_embeddings=True))
    header = json.loads(lines[0])
    assert header["format"] == "epimem-export" and header["version"] == 1 and header["embeddings"] is True
    model = header["embedding_model"]
    assert model["id"] == service.embedder.model_id and model["dimension"] == 384
    assert model["name"] == "all-MiniLM-L6-v2" and model["fingerprint"]
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds[-1] == "end" and {"session", "message", "episode", "summary", "message_vector"} <= set(kinds)
    states = {json.loads(line)["record"]["state"] for line in lines if json.loads(line)["type"] == "message"}
    assert states == {"done", "pending"}

    target = make_service(data_dir=tmp_path / "restored")
    restored = group_id + "-restored"  # a fresh group (the server backend shares one Chroma)
    receipt = target.import_group(lines, group_id=restored)
    assert not receipt.reembedded and receipt.source_group_id == group_id
    assert (receipt.sessions, receipt.messages, receipt.episodes, receipt.summaries) == (2, 9, 4, 2)
    assert _results(target, restored) == _results(service, group_id)
    assert _state(target, restored) == _state(service, group_id)
    assert target.pending_messages(restored, "s2") == 1

    again = target.import_group(lines, group_id=restored)
    assert again == receipt
    assert _state(target, restored) == _state(service, group_id)
    # The restored group works as a live one: the pending message forms its episode.
    assert target.flush(restored, "s2")
    assert {s.state for s in target.memory.store.log.list_messages(restored, "s2")} == {MessageState.DONE}


@pytest.mark.slow
def test_import_with_another_model_reembeds(service: Epimem, group_id: str) -> None:
    _fill(service, group_id)
    lines = [json.loads(line) for line in service.export_group(group_id, include_embeddings=True)]
    lines[0]["embedding_model"] = {"id": "other-model:384:0badc0ffee00", "name": "other-model", "dimension": 384}
    for line in lines:
        if "embedding" in line:
            line["embedding"] = [1.0] + [0.0] * 383  # meaningless vectors of the other model: must not be used
    restored = group_id + "-reembedded"
    receipt = service.import_group([json.dumps(line) for line in lines], group_id=restored)
    assert receipt.reembedded and receipt.source_model == "other-model:384:0badc0ffee00"
    expected = _results(service, group_id)
    got = _results(service, restored)
    assert [[i for i, _ in q] for q in got] == [[i for i, _ in q] for q in expected]
    for got_q, expected_q in zip(got, expected, strict=True):
        assert [s for _, s in got_q] == pytest.approx([s for _, s in expected_q], rel=1e-4)
    # Without embeddings in the file the vectors are rebuilt too.
    plain = list(service.export_group(group_id))
    assert all("embedding" not in json.loads(line) for line in plain)
    receipt = service.import_group(plain, group_id=group_id + "-plain")
    assert receipt.reembedded
    assert [[i for i, _ in q] for q in _results(service, group_id + "-plain")] == [[i for i, _ in q] for q in expected]


def test_bad_files_are_refused_before_anything_is_written(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    lines = list(service.export_group(group_id))
    target = group_id + "-bad"
    header = json.loads(lines[0])
    bad_files = {
        "version": [json.dumps({**header, "version": 99}), *lines[1:]],
        "truncated": lines[:-1],
        "not json": [*lines[:3], "{not json", *lines[3:]],
        "no header": lines[1:],
        "count": [*lines[:2], *lines[3:]],
        "bad message": [*lines[:-1], json.dumps({"type": "message", "record": {"x": 1}}), lines[-1]],
        "empty": [],
    }
    for name, bad in bad_files.items():
        with pytest.raises(InvalidInputError):
            service.import_group(bad, group_id=target)
        assert [name for name, _ in service.memory.store.admin.epimem_collections(target)] == [], name
    with pytest.raises(InvalidInputError):
        service.import_group(lines, group_id="")
    with pytest.raises(NotFoundError):
        service.export_group(group_id + "-missing")

    # The same message id with other content in the target group: a conflict, nothing written.
    service.add_messages(target, "s1", [{"id": "s1-a-0", "content": "something else", "timestamp": T0}])
    with pytest.raises(ConflictError):
        service.import_group(lines, group_id=target)
    assert [m.id for m in service.history(target, "s1")] == ["s1-a-0"]
    page = service.timeline(target)  # the one pending message, as its session's open episode: nothing else
    assert [e.source_message_ids for e in page.episodes] == [("s1-a-0",)] and page.pending == [page.episodes[0].uuid]
