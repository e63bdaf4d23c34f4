"""Foundation: ingestion, storage and the first read path over real Chroma and the real model."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from helpers import builders
from helpers.checks import formed as formed_episodes

from api.facade import Epimem
from memory.errors import ConflictError, NotFoundError
from memory.models import BoundaryReason, GenerationMethod, MessageState

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


conversation = partial(
    builders.messages, start=T0, text="Message {i}: I went hiking at Lake Tahoe with my dog Rex number {i}."
)


def test_add_is_idempotent_and_conflicts_are_refused(service: Epimem, group_id: str) -> None:
    messages = conversation(3)
    first = service.add_messages(group_id, "s1", messages)
    assert first.accepted == ["m0", "m1", "m2"] and first.duplicates == []
    again = service.add_messages(group_id, "s1", messages)
    assert again.accepted == [] and again.duplicates == ["m0", "m1", "m2"]
    changed = dict(messages[0], content="something else")
    with pytest.raises(ConflictError):
        service.add_messages(group_id, "s1", [changed, conversation(5)[4]])
    # Nothing of the refused batch was written.
    assert [m.id for m in service.history(group_id, "s1")] == ["m0", "m1", "m2"]


def test_flush_turns_every_message_into_a_searchable_episode(service: Epimem, group_id: str) -> None:
    messages = conversation(30)
    service.add_messages(group_id, "s1", messages)  # 30 >= the threshold: closed segments form at once
    service.flush(group_id, "s1")
    episodes = service.timeline(group_id, limit=500).episodes
    covered = [mid for episode in episodes for mid in episode.source_message_ids]
    assert sorted(covered) == sorted(m["id"] for m in messages)
    assert len(covered) == len(set(covered))
    assert all(e.generation is GenerationMethod.OFFLINE for e in episodes)
    assert all(e.message_count == len(e.source_message_ids) for e in episodes)
    assert service.pending_messages(group_id, "s1") == 0
    hits = service.search(group_id, "hiking at Lake Tahoe", k=3)
    assert hits and hits[0].episode.group_id == group_id
    assert hits[0].components.vector > 0.3


def test_offline_episode_keeps_speakers_and_absolute_dates(service: Epimem, group_id: str) -> None:
    service.add_messages(
        group_id,
        "s1",
        [
            {
                "id": "a",
                "content": "I went to the support group yesterday.",
                "producer_id": "Caroline",
                "timestamp": "2023-05-08T13:56:00Z",
            },
            {
                "id": "b",
                "content": "That's brave, Caroline!",
                "producer_id": "Melanie",
                "timestamp": "2023-05-08T13:57:00+00:00",
            },
        ],
    )
    (episode,) = service.flush(group_id, "s1")
    assert "Caroline" in episode.content and "Melanie" in episode.content
    assert "7 May 2023" in episode.content
    assert episode.timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert episode.source_message_ids == ("a", "b")


def test_time_gap_cuts_episodes(service: Epimem, group_id: str) -> None:
    early = conversation(3)
    late = conversation(3, start=T0 + timedelta(days=2))
    late = [dict(m, id=f"late-{m['id']}") for m in late]
    service.add_messages(group_id, "s1", early + late)
    episodes = service.flush(group_id, "s1")
    assert [e.source_message_ids for e in episodes] == [("m0", "m1", "m2"), ("late-m0", "late-m1", "late-m2")]
    assert episodes[0].boundary_reason is BoundaryReason.TIME_GAP


def test_timeline_is_in_event_time_order_and_expand_returns_sources(service: Epimem, group_id: str) -> None:
    service.add_messages(group_id, "b", conversation(2, start=T0 + timedelta(days=3)))
    service.add_messages(group_id, "a", conversation(2))
    service.flush(group_id, "a")
    service.flush(group_id, "b")
    page = service.timeline(group_id)
    assert [e.session_id for e in page.episodes] == ["a", "b"]
    only_b = service.timeline(group_id, session_id="b")
    assert [e.session_id for e in only_b.episodes] == ["b"]
    episode = service.get_episode(group_id, "a", page.episodes[0].uuid)
    messages = service.episode_messages(group_id, episode)
    assert [m.id for m in messages] == ["m0", "m1"]
    with pytest.raises(NotFoundError):
        service.get_episode(group_id, "b", episode.uuid)


def test_groups_are_isolated(service: Epimem, group_id: str) -> None:
    other = group_id + "-other"
    service.add_messages(group_id, "s", conversation(2))
    service.add_messages(other, "s", [dict(m, content="Secret: the vault code is 4711") for m in conversation(2)])
    service.flush(group_id, "s")
    service.flush(other, "s")
    hits = service.search(group_id, "vault code 4711", k=10)
    assert hits and all(hit.episode.group_id == group_id for hit in hits)
    assert all("4711" not in hit.episode.content for hit in hits)


@pytest.mark.parametrize(
    "scope_id",
    ["x", "a" * 500, "team ä/ü 🚀 with spaces", "../../etc/passwd", "UPPER.lower-_"],
)
def test_any_scope_id_maps_to_a_valid_partition(service: Epimem, scope_id: str) -> None:
    service.add_messages(scope_id, scope_id, conversation(2))
    (episode,) = service.flush(scope_id, scope_id)
    assert episode.group_id == scope_id and episode.session_id == scope_id
    assert service.search(scope_id, "hiking", session_ids=[scope_id])
    service.delete_group(scope_id)


def test_delete_session_and_group_leave_nothing(service: Epimem, group_id: str) -> None:
    before = set(service.memory.store.admin.collection_names()) | {"epm-registry"}
    service.add_messages(group_id, "s1", conversation(3))
    service.add_messages(group_id, "s2", conversation(3))
    service.flush(group_id, "s1")
    service.flush(group_id, "s2")
    receipt = service.delete_session(group_id, "s1")
    assert receipt.vectors > 0 and receipt.log_records > 0
    assert all(hit.episode.session_id == "s2" for hit in service.search(group_id, "hiking", k=10))
    assert service.history(group_id, "s1") == []
    service.delete_group(group_id)
    assert set(service.memory.store.admin.collection_names()) == before
    assert group_id not in service.list_groups()
    assert service.search(group_id, "hiking") == []
    # Deleting again is a no-op, not an error.
    again = service.delete_group(group_id)
    assert again.collections == [] and again.vectors == 0


def test_messages_survive_a_restart_and_recover_into_episodes(make_service, group_id: str) -> None:
    first = make_service()
    first.add_messages(group_id, "s1", conversation(4))
    first.close()
    second = make_service(episode_idle_seconds=0.5)
    assert [m.id for m in second.history(group_id, "s1")] == ["m0", "m1", "m2", "m3"]
    stored = second.memory.store.log.list_messages(group_id, "s1")
    assert {s.state for s in stored} == {MessageState.PENDING}
    time.sleep(0.6)
    episodes = [e for e in second.recover() if e.group_id == group_id]  # the tail arrived > idle ago: formed too
    assert sorted(mid for e in episodes for mid in e.source_message_ids) == ["m0", "m1", "m2", "m3"]
    assert [e for e in second.recover() if e.group_id == group_id] == []


def test_threshold_forms_episodes_in_the_background(make_service, group_id: str) -> None:
    service = make_service(background=True, auto_flush_pending=6, episode_max_messages=4)
    service.add_messages(group_id, "s1", conversation(8, start=datetime.now(UTC) - timedelta(minutes=10)))
    assert service.wait_idle(timeout=60)
    formed = formed_episodes(service.timeline(group_id))
    assert formed, "the threshold should have formed the closed segments"
    assert sum(e.message_count for e in formed) < 8 or service.pending_messages(group_id, "s1") == 0
