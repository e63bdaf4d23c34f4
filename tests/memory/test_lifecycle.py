"""Lifecycle: scoped history, summaries that link their sources (all or nothing), model change and
re-embedding — over real Chroma (embedded and server) and the real model."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from helpers.builders import REFERENCE, T0, chat, two_episode_session
from helpers.embedders import ProjectedEmbedder

from api.facade import Epimem
from memory.episodes.generation import GeneratorStats, OfflineEpisodeGenerator
from memory.errors import EpimemError, InvalidInputError, ModelMismatchError
from memory.ids import GROUP_SUMMARY_SESSION
from memory.lifecycle.summaries import PLAN_KIND, Summariser
from memory.models import Episode, EpisodeType, GenerationMethod, Segment
from memory.store.records import RecordFilter

# -- history ---------------------------------------------------------------------------------------


def test_history_is_event_time_ordered_paged_and_exactly_scoped(service: Epimem, group_id: str) -> None:
    late = chat("late", 3, start=T0 + timedelta(hours=2))
    early = chat("early", 3, start=T0)
    service.add_messages(group_id, "s1", late)
    service.add_messages(group_id, "s1", early)  # arrives later, happened earlier
    service.add_messages(group_id, "s2", chat("other-session", 2, start=T0))
    service.add_messages(group_id + "-x", "s1", chat("other-group", 2, start=T0))
    expected = [m["id"] for m in early + late]
    assert [m.id for m in service.history(group_id, "s1")] == expected
    first = service.history(group_id, "s1", limit=4)
    assert first.next_cursor is not None
    second = service.history(group_id, "s1", limit=4, cursor=first.next_cursor)
    assert [[m.id for m in page] for page in (first, second)] == [expected[:4], expected[4:]]
    assert second.next_cursor is None
    assert [m.id for m in service.history(group_id, "s2")] == ["other-session-0", "other-session-1"]
    assert service.history(group_id, "no-such-session") == []
    for bad in ({"limit": 0}, {"limit": 100_000}, {"cursor": "not-a-cursor"}):
        with pytest.raises(InvalidInputError):
            service.history(group_id, "s1", **bad)
    with pytest.raises(InvalidInputError):
        service.add_messages(group_id, GROUP_SUMMARY_SESSION, chat("x", 1, start=T0))
    # The facade offers no read of messages or episodes without a group (and a session for messages).
    assert not any(name in dir(service) for name in ("all_messages", "all_episodes", "list_all"))


# -- summaries ---------------------------------------------------------------------------------------


def _episodes(service: Epimem, group_id: str) -> list[Episode]:
    page = service.timeline(group_id, limit=500)
    return [e for e in page.episodes if e.episode_type is EpisodeType.EPISODE]


def test_group_summaries_link_every_source_and_mark_them(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=5)
    episodes = _episodes(service, group_id)
    assert len(episodes) == 4
    history_before = {s: service.history(group_id, s) for s in ("s1", "s2")}

    summaries = service.generate_summaries(group_id, days_back=60, max_memories_per_summary=3, reference_time=REFERENCE)
    assert [s.unit_count for s in summaries] == [3, 1]
    by_time = sorted(episodes, key=lambda e: (e.timestamp, e.uuid))
    assert [eid for s in summaries for eid in s.source_episode_ids] == [e.uuid for e in by_time]
    for summary in summaries:
        sources = [e for e in by_time if e.uuid in summary.source_episode_ids]
        assert summary.episode_type is EpisodeType.SUMMARY
        assert summary.session_id == GROUP_SUMMARY_SESSION and summary.group_id == group_id
        assert summary.generation is GenerationMethod.OFFLINE
        assert summary.source_message_ids == tuple(m for e in sources for m in e.source_message_ids)
        assert summary.message_count == len(summary.source_message_ids)
        assert summary.period_start == sources[0].timestamp and summary.period_end == sources[-1].timestamp
        assert all(e.title in summary.content for e in sources)
        # Stored as returned, and each source marked in its own partition and in the group index.
        assert service.get_episode(group_id, GROUP_SUMMARY_SESSION, summary.uuid) == summary
        for source in sources:
            assert service.get_episode(group_id, source.session_id, source.uuid).summarised_by == summary.uuid
        index = {r.id: r for r in service.memory.store.vectors.records(group_id, ids=list(summary.source_episode_ids))}
        assert {r.metadata["summarised_by"] for r in index.values()} == {summary.uuid}

    # Originals stay; nothing is summarised twice; no journal record is left.
    assert {e.uuid for e in _episodes(service, group_id)} == {e.uuid for e in episodes}
    assert {s: service.history(group_id, s) for s in ("s1", "s2")} == history_before
    assert (
        service.generate_summaries(group_id, days_back=60, max_memories_per_summary=3, reference_time=REFERENCE) == []
    )
    assert service.memory.store.log.records(group_id, PLAN_KIND) == []

    # Search, expansion and context use summaries.
    first = summaries[0]
    hits = service.search(group_id, first.title, k=10, expand=True)
    summary_hits = [h for h in hits if h.episode.uuid == first.uuid]
    assert summary_hits, "the summary should be found by its own title"
    expanded = [m.id for m in summary_hits[0].messages or []]
    assert sorted(expanded) == sorted(first.source_message_ids)
    assert [m.id for m in service.episode_messages(group_id, first)] == expanded
    assert [e.uuid for e in service.summary_sources(group_id, first)] == list(first.source_episode_ids)
    # The context cites exact messages: a summary is reached through the messages it expands to.
    context = service.context(group_id, first.title, token_budget=4000)
    cited = {m for c in context.citations for m in c.message_ids}
    assert cited and cited <= {m for s in summaries for m in s.source_message_ids}


def test_session_summary_lives_in_its_session_and_respects_the_period(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=0)
    # A period that ends before the second episode: only the first episode of s1 is summarised.
    reference = T0 + timedelta(hours=12)
    (summary,) = service.generate_summaries(
        group_id, session_id="s1", days_back=1, max_memories_per_summary=10, reference_time=reference
    )
    assert summary.session_id == "s1" and summary.unit_count == 1
    assert service.get_episode(group_id, "s1", summary.uuid).episode_type is EpisodeType.SUMMARY
    s2 = [e for e in _episodes(service, group_id) if e.session_id == "s2"]
    assert all(e.summarised_by is None for e in s2)
    before_anything = T0 - timedelta(minutes=1)
    assert (
        service.generate_summaries(group_id, days_back=1, max_memories_per_summary=5, reference_time=before_anything)
        == []
    )
    for bad in (
        {"days_back": 0, "max_memories_per_summary": 3},
        {"days_back": 1, "max_memories_per_summary": 0},
        {"days_back": float("nan"), "max_memories_per_summary": 3},
        {"days_back": 1, "max_memories_per_summary": 3, "session_id": GROUP_SUMMARY_SESSION},
    ):
        with pytest.raises(InvalidInputError):
            service.generate_summaries(group_id, **bad)


class _StandInGenerator:
    """A stand-in at the generator seam (the LLM generator is tested with a real HTTP server elsewhere)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.segments: list[Segment] = []

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        self.segments.append(segment)
        if self.fail:
            raise EpimemError("the model is down")
        base = OfflineEpisodeGenerator().generate(
            segment, group_id=group_id, session_id=session_id, episode_id=episode_id
        )
        return base.model_copy(
            update={"title": "LLM title", "content": "LLM content", "generation": GenerationMethod.LLM}
        )

    def stats(self) -> GeneratorStats:
        return GeneratorStats(model="stand-in")


def test_summaries_use_the_generator_seam_and_fall_back_offline(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    sources = _episodes(service, group_id)
    generator = _StandInGenerator()
    summariser = _summariser(service, generator)
    made = summariser.build(group_id, "s1", "sum-1", sources)
    assert (made.title, made.content, made.generation) == ("LLM title", "LLM content", GenerationMethod.LLM)
    assert [m.id for m in generator.segments[0].messages] == [
        e.uuid for e in sorted(sources, key=lambda e: e.timestamp)
    ]
    failing = _summariser(service, _StandInGenerator(fail=True))
    fallback = failing.build(group_id, "s1", "sum-1", sources)
    assert fallback.generation is GenerationMethod.FALLBACK and fallback.content.startswith("Summary of 2 episodes")


# -- all or nothing: a failure injected at every write ----------------------------------------------------


def _summariser(service: Epimem, generator: Any = None) -> Summariser:
    """A summariser over the service's own store (the service builds one like it)."""
    store = service.memory.store
    return Summariser(log=store.log, vectors=store.vectors, embedder=service.embedder, generator=generator)


class _WriteFaults:
    """Counts collection writes while armed; the ``fail_at``-th raises once."""

    def __init__(self) -> None:
        self.armed = False
        self.writes = 0
        self.fail_at = 0

    def wrap(self, collection: Any) -> Any:
        return None if collection is None else _CountingCollection(collection, self)


class _CountingCollection:
    def __init__(self, collection: Any, faults: _WriteFaults) -> None:
        self._collection = collection
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._collection, name)
        if name not in ("add", "upsert", "update", "delete", "rewrite", "remove", "modify") or not self._faults.armed:
            return attribute

        def write(*args: Any, **kwargs: Any) -> Any:
            self._faults.writes += 1
            if self._faults.writes == self._faults.fail_at:
                raise RuntimeError(f"injected failure at write {self._faults.writes}")
            return attribute(*args, **kwargs)

        return write


@pytest.mark.slow
def test_a_failed_summary_run_leaves_no_summary_and_no_marker(make_service, group_id: str, monkeypatch) -> None:
    """The real store, whose Nth collection write (while armed) raises once, at every N in turn. (Thread
    locks for formation, so that only the summary run's own writes are counted, not lease records.)"""
    service = make_service(coordination="local")
    connection = service.memory.store.connection
    faults = _WriteFaults()
    opened = connection.handle
    monkeypatch.setattr(connection, "handle", lambda name, opener: faults.wrap(opened(name, opener)))
    for day, session_id in enumerate(("s1", "s2")):  # one episode each: two partitions to mark
        service.add_messages(group_id, session_id, chat(session_id, 2, start=T0 + timedelta(days=day), topic=day))
        service.flush(group_id, session_id)
    log, vectors = service.memory.store.log, service.memory.store.vectors

    def clean() -> None:
        assert [r.id for r in vectors.records(group_id) if r.kind == "summary"] == []
        for session_id in ("s1", "s2", GROUP_SUMMARY_SESSION):
            for record in vectors.records(group_id, selection=RecordFilter(session_ids=(session_id,))):
                assert record.kind != "summary"
                assert "summarised_by" not in record.metadata
        assert log.records(group_id, PLAN_KIND) == []

    failures = 0
    for fail_at in range(1, 50):
        faults.writes, faults.fail_at, faults.armed = 0, fail_at, True
        try:
            summaries = service.generate_summaries(
                group_id, days_back=60, max_memories_per_summary=3, reference_time=REFERENCE
            )
        except RuntimeError as error:
            assert f"write {fail_at}" in str(error)
            faults.armed = False
            clean()
            failures += 1
            continue
        faults.armed = False
        break
    # journal, summary (partition + index), marks (2 partitions + index), journal removal
    assert failures == 8, "every write of the run was a failure point"
    assert [s.unit_count for s in summaries] == [2]
    assert all(e.summarised_by for e in _episodes(service, group_id))


def test_recover_rolls_back_a_run_that_died_half_way(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    summariser = _summariser(service)
    planned = summariser.plan(group_id, None, T0 - timedelta(days=1), REFERENCE, 10)
    (summary,) = summariser.write(group_id, planned)
    # Simulate a process that died after writing everything but the journal's removal.
    service.memory.store.log.put_record(group_id, f"plan-{summary.uuid}", _journal(summary), {"kind": PLAN_KIND})
    service.recover()
    assert [e for e in service.timeline(group_id).episodes if e.episode_type is EpisodeType.SUMMARY] == []
    assert all(e.summarised_by is None for e in _episodes(service, group_id))
    assert service.memory.store.log.records(group_id, PLAN_KIND) == []


def _journal(summary: Episode) -> str:
    return json.dumps(
        {
            "summaries": [[GROUP_SUMMARY_SESSION, summary.uuid]],
            "sources": [["s1", episode_id] for episode_id in summary.source_episode_ids],
        }
    )


# -- model change ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_another_model_is_refused_until_reembed(service: Epimem, settings_for, embedder, group_id: str) -> None:
    other_group = group_id + "-untouched"
    for group in (group_id, other_group):
        two_episode_session(service, group, "s1", day=0)
    service.generate_summaries(group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE)
    service.add_messages(group_id, "s1", chat("pending", 1, start=T0 + timedelta(days=9)))
    expected_top = service.search(group_id, "pottery class blue vase", k=1)[0].episode.uuid
    vectors_before = service.vector_count(group_id)

    projected = ProjectedEmbedder(embedder)
    changed = Epimem.from_settings(settings_for(), background=False, embedder=projected)
    try:
        with pytest.raises(ModelMismatchError) as refused:
            changed.search(group_id, "pottery class")
        assert refused.value.status_code == 409
        assert "all-MiniLM-L6-v2" in refused.value.message and "reembed" in refused.value.message

        calls: list[tuple[int, int]] = []
        report = changed.reembed(group_id, progress=lambda done, total: calls.append((done, total)))
        total = calls[-1][1]
        assert calls[0] == (0, total) and calls[-1] == (total, total)
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
        assert total == report.vectors == vectors_before > 0
        assert report.groups == [group_id]

        assert changed.search(group_id, "pottery class blue vase", k=1)[0].episode.uuid == expected_top
        stored = changed.memory.store.vectors.records(group_id, embeddings=True)
        assert {len(r.embedding) for r in stored if r.embedding is not None} == {256}
        for name, metadata in changed.memory.store.admin.epimem_collections(group_id):
            if metadata["epimem"] in ("partition", "index"):
                assert metadata["epimem_model"] == projected.model_id, name
        assert changed.vector_count(group_id) == vectors_before
        # New writes after the re-embed use the new model; the pending message forms normally.
        assert changed.flush(group_id, "s1")
        # Only the named group was rebuilt; the old service is now the one refused.
        with pytest.raises(ModelMismatchError):
            changed.search(other_group, "pottery")
        service.memory.store.admin.forget_handles()
        with pytest.raises(ModelMismatchError):
            service.search(group_id, "pottery")
        again = changed.reembed(group_id)
        assert again.vectors == 0 and again.collections == [] and again.skipped
    finally:
        changed.close()


def test_an_interrupted_rebuild_is_finished_not_lost(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    admin, client = service.memory.store.admin, service.memory.store.connection.client
    (index,) = [name for name, m in admin.epimem_collections(group_id) if m["epimem"] == "index"]
    before = sorted(r.id for r in admin.read_collection(index))
    # An interruption between dropping the original and renaming its rebuilt copy.
    records = admin.read_collection(index)
    vectors = service.embedder.embed_batch([r.document for r in records])
    temporary = client.create_collection(f"{index}-rebuild", metadata={"epimem": "index", "group_id": group_id})
    temporary.add(ids=[r.id for r in records], embeddings=vectors, documents=[r.document for r in records])
    client.delete_collection(index)
    admin.forget_handles()
    assert admin.finish_rebuilds() == [index]
    assert sorted(r.id for r in admin.read_collection(index)) == before
    assert not [name for name in admin.collection_names() if name.endswith("-rebuild")]
