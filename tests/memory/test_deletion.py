"""Deletion that leaves nothing behind: messages, episodes, summaries, sessions, groups — checked by
scanning every collection of the Chroma client and the in-memory caches afterwards."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from helpers.builders import REFERENCE, T0, chat, two_episode_session
from helpers.checks import cached_keyword_text, every_client, formed, kept_keyword_indexes, scan_client

from api.facade import Epimem
from memory.errors import NotFoundError
from memory.ids import GROUP_SUMMARY_SESSION
from memory.models import EpisodeType
from memory.store.codec import message_record_id, partition_name


def _marker() -> str:
    return f"zq{uuid.uuid4().hex[:10]}"


def _summarise(service: Epimem, group_id: str) -> list:
    return service.generate_summaries(group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE)


def _episode_of(service: Epimem, group_id: str, session_id: str, message_id: str):
    for episode in service.timeline(group_id, session_id=session_id, limit=500).episodes:
        if message_id in episode.source_message_ids and episode.episode_type is EpisodeType.EPISODE:
            return episode
    return None


@pytest.mark.slow
def test_delete_message_repairs_its_episode_and_summary(service: Epimem, group_id: str) -> None:
    marker = _marker()
    secret = f"secret-{marker}"
    messages = chat("s1-a", 3, start=T0, marker=marker)
    messages[0]["id"] = secret
    service.add_messages(group_id, "s1", messages)
    service.flush(group_id, "s1")
    two_episode_session(service, group_id, "s2", day=3)
    episode = _episode_of(service, group_id, "s1", secret)
    assert episode is not None and marker in episode.content
    (summary,) = _summarise(service, group_id)
    assert secret in summary.source_message_ids
    service.search(group_id, "hiking with the dog", k=5)  # fills the keyword cache with the marker
    assert marker in cached_keyword_text(service)

    receipt = service.delete_message(group_id, "s1", secret)
    assert receipt.messages == [secret]
    assert receipt.log_records == 1 and receipt.vectors == 2  # the log; the partition and the group index
    assert set(receipt.repaired) == {episode.uuid, summary.uuid}
    assert "keyword-index" in receipt.caches

    repaired = service.get_episode(group_id, "s1", episode.uuid)
    assert repaired.source_message_ids == ("s1-a-1", "s1-a-2") and repaired.message_count == 2
    assert repaired.summarised_by == summary.uuid
    assert marker not in repaired.content + repaired.title
    rebuilt = service.get_episode(group_id, GROUP_SUMMARY_SESSION, summary.uuid)
    assert secret not in rebuilt.source_message_ids and rebuilt.source_episode_ids == summary.source_episode_ids
    assert [m.id for m in service.history(group_id, "s1")] == ["s1-a-1", "s1-a-2"]

    needles = [marker, secret, message_record_id("s1", secret)]
    assert scan_client(every_client(service), needles) == []
    assert marker not in cached_keyword_text(service)
    assert all(marker not in hit.episode.content for hit in service.search(group_id, marker, k=20))
    assert marker not in cached_keyword_text(service)
    with pytest.raises(NotFoundError):
        service.delete_message(group_id, "s1", secret)
    with pytest.raises(NotFoundError):  # exact scope: s2 has no such message
        service.delete_message(group_id, "s2", "s1-a-1")


def test_deleting_the_last_messages_removes_episode_and_summary(service: Epimem, group_id: str) -> None:
    service.add_messages(group_id, "s1", chat("only", 2, start=T0))
    (episode,) = service.flush(group_id, "s1")
    (summary,) = _summarise(service, group_id)
    first = service.delete_message(group_id, "s1", "only-0")
    assert first.repaired == [episode.uuid, summary.uuid]
    last = service.delete_message(group_id, "s1", "only-1")
    assert last.episodes == [episode.uuid] and last.summaries == [summary.uuid]
    assert service.timeline(group_id).episodes == []
    local = ["only-0", "only-1"]
    assert scan_client(every_client(service), [episode.uuid, summary.uuid], local=local, group_id=group_id) == []


@pytest.mark.slow
def test_delete_episode_and_summary(service: Epimem, group_id: str) -> None:
    marker = _marker()
    two_episode_session(service, group_id, "s1", day=0, marker=marker)
    two_episode_session(service, group_id, "s2", day=3)
    summaries = _summarise(service, group_id)
    (summary,) = summaries
    doomed = _episode_of(service, group_id, "s1", "s1-a-0")
    assert doomed is not None and marker in doomed.content

    with pytest.raises(NotFoundError):  # exact scope
        service.delete_episode(group_id, "s2", doomed.uuid)
    receipt = service.delete_episode(group_id, "s1", doomed.uuid)
    assert receipt.episodes == [doomed.uuid]
    assert sorted(receipt.messages) == sorted(doomed.source_message_ids)
    assert receipt.repaired == [summary.uuid]
    rebuilt = service.get_episode(group_id, GROUP_SUMMARY_SESSION, summary.uuid)
    assert doomed.uuid not in rebuilt.source_episode_ids and rebuilt.unit_count == 3
    assert [m.id for m in service.history(group_id, "s1")] == ["s1-b-0", "s1-b-1"]
    local = list(doomed.source_message_ids)
    assert scan_client(every_client(service), [marker, doomed.uuid], local=local, group_id=group_id) == []

    # Deleting a summary keeps its sources and clears their marks.
    receipt = service.delete_episode(group_id, GROUP_SUMMARY_SESSION, summary.uuid)
    assert receipt.summaries == [summary.uuid] and receipt.vectors == 2
    remaining = service.timeline(group_id, limit=500).episodes
    assert len(remaining) == 3 and all(e.summarised_by is None for e in remaining)
    assert scan_client(every_client(service), [summary.uuid]) == []


@pytest.mark.slow
def test_delete_session_and_group_leave_nothing_anywhere(service: Epimem, group_id: str) -> None:
    marker_s1, marker_s2 = _marker(), _marker()
    two_episode_session(service, group_id, "s1", day=0, marker=marker_s1)
    two_episode_session(service, group_id, "s2", day=3, marker=marker_s2)
    service.add_messages(group_id, "s1", chat("s1-pending", 1, start=T0 + timedelta(days=2)))
    (summary,) = _summarise(service, group_id)
    s1_episodes = [e.uuid for e in formed(service.timeline(group_id, session_id="s1"))]
    service.search(group_id, "hiking", k=5)
    s1_partition = partition_name(group_id, "s1")
    assert s1_partition in service.memory.store.connection.cached()

    receipt = service.delete_session(group_id, "s1")
    assert sorted(receipt.episodes) == sorted(s1_episodes)
    assert "s1-pending-0" in receipt.messages and "s1-a-0" in receipt.messages
    assert receipt.collections == [s1_partition] and receipt.repaired == [summary.uuid]
    assert s1_partition not in service.memory.store.connection.cached()
    rebuilt = service.get_episode(group_id, GROUP_SUMMARY_SESSION, summary.uuid)
    assert not set(s1_episodes) & set(rebuilt.source_episode_ids) and rebuilt.unit_count == 2
    local = ["s1-a-0", "s1-pending-0", message_record_id("s1", "s1-a-0"), partition_name(group_id, "s1")]
    assert scan_client(every_client(service), [marker_s1, *s1_episodes], local=local, group_id=group_id) == []
    assert marker_s1 not in cached_keyword_text(service)
    assert [s.session_id for s in service.list_sessions(group_id)] == ["s2"]

    service.search(group_id, "hiking", k=5)
    receipt = service.delete_group(group_id)
    assert receipt.collections and receipt.vectors > 0 and receipt.log_records > 0
    assert scan_client(every_client(service), [group_id, marker_s2, summary.uuid]) == []
    assert not [name for name in service.memory.store.connection.cached() if name in receipt.collections]
    assert group_id not in kept_keyword_indexes(service) and marker_s2 not in cached_keyword_text(service)
    assert group_id not in service.list_groups()
    again = service.delete_group(group_id)
    assert again.collections == [] and again.vectors == 0 and again.log_records == 0


@pytest.mark.slow
def test_group_delete_under_concurrent_writes(service: Epimem, group_id: str) -> None:
    """The rule: a message acknowledged before delete_group was called is gone; a message whose add
    started after it returned is kept; an add that overlaps the delete is wholly gone or wholly kept,
    and nothing of the group exists that is not part of a kept add."""
    acked: list[tuple[float, float, str, list[str]]] = []  # started, acknowledged, session, ids
    errors: list[BaseException] = []
    stop = threading.Event()
    deleted = threading.Event()
    guard = threading.Lock()

    def writer(session_id: str) -> None:
        n = 0
        now = datetime.now(UTC)
        while not stop.is_set():
            batch = [
                {"id": f"{session_id}-{n}-{k}", "content": f"note {n} {k} from {session_id}", "timestamp": now}
                for k in range(2)
            ]
            started = time.monotonic()
            try:
                service.add_messages(group_id, session_id, batch)
                if n % 3 == 2:
                    service.flush(group_id, session_id)  # formation races the delete too
            except BaseException as error:  # noqa: BLE001 - collected and asserted below
                errors.append(error)
                return
            with guard:
                acked.append((started, time.monotonic(), session_id, [m["id"] for m in batch]))
            n += 1
            if deleted.is_set() and n > 200:
                return

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    called = time.monotonic()
    receipt = service.delete_group(group_id)
    returned = time.monotonic()
    deleted.set()
    deadline = time.monotonic() + 60  # until an add that started after the delete returned has been acknowledged
    while time.monotonic() < deadline:
        with guard:
            if any(started > returned for started, *_ in acked):
                break
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert receipt.log_records > 0

    kept = {(s, m.id) for s in {a[2] for a in acked} for m in service.history(group_id, s, limit=1000)}
    for started, acknowledged, session_id, ids in acked:
        present = [(session_id, i) in kept for i in ids]
        if acknowledged < called:
            assert not any(present), "acknowledged before the delete, yet still there"
        elif started > returned:
            assert all(present), "added after the delete returned, yet missing"
        else:
            assert all(present) or not any(present), "an overlapping add was half kept"
    assert any(started > returned for started, *_ in acked), "the writers kept writing after the delete"
    # Everything the group holds belongs to a kept add: sessions, vectors, episodes.
    kept_sessions = {s for s, _ in kept}
    assert {info.session_id for info in service.list_sessions(group_id)} == kept_sessions
    for record in service.memory.store.vectors.records(group_id):
        assert record.metadata["session_id"] in kept_sessions
        if record.metadata["kind"] == "message":
            assert (record.metadata["session_id"], record.metadata["message_id"]) in kept
    assert service.delete_group(group_id).log_records > 0
    assert [name for name, _ in service.memory.store.admin.epimem_collections(group_id)] == []
