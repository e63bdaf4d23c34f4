"""The read snapshot, keyword index and learned speaker names a service keeps up to date by patching (what
this process's writes changed, or a diff of a Chroma server's group read again) equal ones built from scratch, whatever
adds, flushes, deletions (of pending messages, of formed messages: their episode is rewritten, of
episodes), imports and another server's writes came between (a Hypothesis state machine, both
backends: real Chroma, the real model)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from helpers.builders import T0, messages
from helpers.checks import by_record, keyword_scores
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from api.facade import Epimem
from api.settings import Settings
from memory.readmodel.model import ReadModel
from memory.readmodel.snapshot import estimate_bytes
from memory.readmodel.speakers import Speakers
from memory.store.factory import open_store
from retrieval.keyword import KeywordIndex, keyword_index
from retrieval.names import learned_names
from retrieval.speaker_names import LEARNED_NAMES, MESSAGE

QUERIES = ["the dog Rex", "lake", "pottery class on Thursday"]
TEXT = ("Hey Mel, the dog Rex swam in the lake.", "Thanks Caro! Rex loves the lake.")
SESSIONS = st.sampled_from(["s0", "s1", "s2"])


class Patches(RuleBasedStateMachine):
    """One group written by the service under test (and, on a Chroma server, by another service)."""

    def __init__(self, service: Epimem, other: Epimem | None, full_group_bytes: int) -> None:
        super().__init__()
        self.service, self.other = service, other
        self.group = f"g-{uuid.uuid4().hex[:8]}"  # the examples share the test's data folder
        store = service.memory.store
        self.scratch = ReadModel(open_store(store.connection, model_id=store.model_id))  # a read model of its own
        service.read_model.full_group_bytes = self.scratch.full_group_bytes = full_group_bytes
        self.counter = 0

    def _batch(self, session: str, count: int) -> list[Any]:
        self.counter += 1
        # Later than every batch before (the learned names are patched then), and the speakers call each
        # other by names they never write themselves (learned after three uses: retrieval.names).
        later = T0 + timedelta(hours=self.counter)
        return messages(count, prefix=f"{session}-{self.counter}-", start=later, text=lambda i: TEXT[i % 2])

    def _known(self, writer: Epimem, session: str) -> list[Any]:
        if session not in {info.session_id for info in writer.memory.sessions(self.group)}:
            return []
        return writer.history(self.group, session)

    @initialize(session=SESSIONS, count=st.integers(1, 3))
    def first_add(self, session: str, count: int) -> None:
        """Every example starts from a group with messages (else a draw of deletes and flushes reads nothing)."""
        self.add(session, count)

    @rule(session=SESSIONS, count=st.integers(1, 3))
    def add(self, session: str, count: int) -> None:
        self.service.add_messages(self.group, session, self._batch(session, count))

    @rule(session=SESSIONS)
    def flush(self, session: str) -> None:
        if self._known(self.service, session):
            self.service.flush(self.group, session)

    @rule(session=SESSIONS, which=st.integers(0, 50))
    def delete_message(self, session: str, which: int) -> None:
        """A pending message, or a formed one (its episode is rewritten without it)."""
        known = self._known(self.service, session)
        if known:
            self.service.delete_message(self.group, session, known[which % len(known)].id)

    @rule(session=SESSIONS)
    def delete_episode(self, session: str) -> None:
        if self._known(self.service, session):
            page = self.service.timeline(self.group, session_id=session, limit=5)
            episodes = [e for e in page.episodes if not e.uuid.startswith("open-")]
            if episodes:
                self.service.delete_episode(self.group, session, episodes[0].uuid)

    @rule(session=SESSIONS)
    def imported(self, session: str) -> None:
        """A small export of another group imported into this one (a session it may already have)."""
        source = f"src-{uuid.uuid4().hex[:8]}"
        self.service.add_messages(source, session, self._batch(f"i{session}", 2))
        self.service.flush(source, session)
        self.service.import_group(list(self.service.export_group(source)), group_id=self.group)

    @rule(session=SESSIONS, count=st.integers(1, 2))
    def other_server_adds(self, session: str, count: int) -> None:
        if self.other is not None:
            self.other.add_messages(self.group, session, self._batch(f"o{session}", count))

    @invariant()
    def patched_equals_scratch(self) -> None:
        if not self.service.memory.sessions(self.group):
            return
        self.service.search(self.group, QUERIES[0], k=3)  # the read path takes (or patches) the snapshot
        kept = self.service.read_model.snapshot(self.group, fresh=True)
        reader = self.service.read_model.reader(self.group)
        assert reader.columns is kept
        fresh = self.scratch.snapshot(self.group, fresh=True)
        scratch = self.scratch.reader(self.group)
        self.scratch.forget(self.group)  # from scratch every time
        assert by_record(kept) == by_record(fresh)
        assert kept.full == fresh.full or not len(fresh)  # an empty group fits any bound: read as full
        assert (kept.directions is None) == (fresh.directions is None)
        estimated = estimate_bytes(kept)  # the patched size estimate stays near a full count's
        assert abs(kept.nbytes - estimated) <= 0.2 * estimated + 8192
        assert (kept.messages or {}) == (fresh.messages or {})
        assert [s.session_id for s in kept.sessions] == [s.session_id for s in fresh.sessions]
        index = keyword_index(reader)
        built = KeywordIndex(fresh)
        # The same vocabulary: nothing of a deleted or rewritten text stays in the patched index.
        assert index._postings.vocabulary.keys() == built._postings.vocabulary.keys()
        for query in QUERIES:
            ours, theirs = keyword_scores(index, kept, query), keyword_scores(built, fresh, query)
            assert ours.keys() == theirs.keys()
            assert np.allclose([ours[r] for r in theirs], list(theirs.values()), rtol=1e-6, atol=1e-7), query
        # The speakers (patched when a write only added records) as read anew.
        assert reader.speakers() == Speakers().build(scratch)
        # The names learned from the messages (patched when a write only added later ones) as learned anew.
        learned = reader.derived(LEARNED_NAMES)
        order = [p for p in np.argsort(fresh.timestamps, kind="stable").tolist() if fresh.kinds[p] == MESSAGE]
        assert learned.names == learned_names(
            (fresh.producers[p], fresh.produced_for[p], fresh.documents[p]) for p in order
        )


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["full", "vectors"])
def test_patched_snapshots_and_keyword_indexes_equal_fresh_ones(
    make_service: Callable[..., Epimem],
    backend: str,
    settings_for: Callable[..., Settings],
    embedder: Any,
    tier: str,
) -> None:
    """``tier`` "vectors": every group past the full bound, its vectors and messages kept (not its metadata)."""
    service = make_service(auto_flush_pending=4)
    other = None
    if backend == "server":  # a second epimem on the same Chroma server, with a folder of its own
        base = settings_for(auto_flush_pending=4)
        other = Epimem.from_settings(
            base.model_copy(update={"data_dir": base.data_dir / "other", "node_id": "other"}),
            background=False,
            embedder=embedder,
        )
    try:
        stats = service.read_model.stats
        run_state_machine_as_test(
            lambda: Patches(service, other, 0 if tier == "vectors" else 128 * 2**20),
            settings=settings(
                max_examples=5,
                stateful_step_count=8,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
            ),
        )
        # Which writes the examples above made is Hypothesis's draw (a run may have none after a read): the
        # patching itself is checked on a fixed sequence, read after each write.
        group = f"g-{uuid.uuid4().hex[:8]}"
        service.add_messages(group, "s0", messages(2, prefix="fixed-a-", text=lambda i: TEXT[i % 2]))
        service.flush(group, "s0")
        service.search(group, QUERIES[0], k=3)
        before = stats()
        later = T0 + timedelta(days=2)
        service.add_messages(group, "s0", messages(1, prefix="fixed-b-", start=later, text=lambda i: TEXT[i % 2]))
        service.search(group, QUERIES[0], k=3)
        service.delete_message(group, "s0", service.history(group, "s0")[0].id)  # a formed one: its episode rewritten
        service.search(group, QUERIES[0], k=3)
        after = stats()
        patched, built = after.extensions - before.extensions, after.builds - before.builds
        if backend == "embedded":  # each write patched the snapshot (the delete too), none read the group again
            assert patched == built == 2
        else:  # this server's own writes too (the other server's are read again)
            assert patched >= 1
    finally:
        if other is not None:
            other.close()


def test_a_group_read_while_empty_is_patched_with_its_first_vectors(
    make_service: Callable[..., Epimem], backend: str
) -> None:
    """A group whose only session was deleted is read with no vector to tell the dimension; the next
    write patches that empty snapshot (it failed: a 500 on the next read, and at close)."""
    service = make_service()
    group = f"g-{uuid.uuid4().hex[:8]}"
    service.add_messages(group, "s1", messages(2, prefix="a-", text=lambda i: TEXT[i % 2]))
    service.flush(group, "s1")
    service.delete_session(group, "s1")
    assert service.search(group, "the dog Rex", k=3) == []
    stats = service.read_model.stats
    extensions = stats().extensions
    service.add_messages(group, "s2", messages(2, prefix="b-", text=lambda i: TEXT[i % 2]))
    hits = service.search(group, "the dog Rex", k=3)
    assert hits and {hit.episode.session_id for hit in hits} == {"s2"}
    if backend == "embedded":  # patched, not read again
        assert stats().extensions > extensions
    patched = service.read_model.snapshot(group)
    fresh = ReadModel(open_store(service.memory.store.connection, model_id=service.memory.store.model_id)).snapshot(
        group
    )
    assert by_record(patched) == by_record(fresh)
