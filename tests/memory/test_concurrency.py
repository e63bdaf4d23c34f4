"""Concurrent writers to the same session (threads and processes): nothing lost, nothing twice.

Real Chroma on both backends, the real model; processes share a real `chroma run` server
(the embedded PersistentClient is single-process by design).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.builders import message
from helpers.checks import assert_consistent
from helpers.paths import ROOT
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from api.facade import Epimem
from memory.episodes.generation import OfflineEpisodeGenerator
from memory.errors import ConflictError
from memory.ingest.coordination import LeaseCoordinator, LeaseLostError, SessionBusyError
from memory.models import Episode, Segment

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

# -- the Chroma property the lease relies on, and the lease itself --------------------------------------------


def test_chroma_add_is_first_writer_wins(service: Epimem, group_id: str) -> None:
    """``add`` of an existing id is ignored on this backend, also under concurrency."""
    store = service.memory.store.log
    for epoch in range(10):
        winners: list[str] = []

        def write(token: str, epoch: int = epoch, winners: list[str] = winners) -> None:
            store.put_lease(group_id, "s", epoch, {"epoch": epoch, "owner": token, "expires": 0.0}, insert=True)
            (found,) = [r for r in store.lease_records(group_id, "s") if r["epoch"] == epoch]
            winners.append(str(found["owner"]))

        threads = [threading.Thread(target=write, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(winners) == 4 and len(set(winners)) == 1, winners


def test_lease_is_exclusive_between_servers(service: Epimem, group_id: str) -> None:
    """Three coordinators (as three servers would have) never hold one session at the same time."""
    coordinators = [
        LeaseCoordinator(service.memory.store.log, node_id=f"node{i}", ttl_s=10, wait_s=60) for i in range(3)
    ]
    inside: list[str] = []
    overlaps: list[list[str]] = []
    entries = Counter[str]()

    def work(coordinator: LeaseCoordinator) -> None:
        for _ in range(4):
            with coordinator.hold([(group_id, "s")]):
                inside.append(coordinator.node_id)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                entries[coordinator.node_id] += 1
                time.sleep(0.01)
                coordinator.verify([(group_id, "s")])
                inside.remove(coordinator.node_id)

    threads = [threading.Thread(target=work, args=(c,)) for c in coordinators]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not overlaps
    assert entries == {"node0": 4, "node1": 4, "node2": 4}
    # Old epochs are cleaned up: at most the last two remain.
    assert len(service.memory.store.log.lease_records(group_id, "s")) <= 2
    for coordinator in coordinators:
        coordinator.close()


def test_expired_lease_is_taken_over_and_the_stalled_holder_cannot_write(service: Epimem, group_id: str) -> None:
    # The servers' shared clock, moved by the test: the lease expires when the test says, however slow the machine.
    now = [time.time()]
    log = service.memory.store.log
    stalled = LeaseCoordinator(log, node_id="stalled", ttl_s=60, wait_s=5, clock=lambda: now[0])
    stalled.close()  # no renewals: as if the process froze
    other = LeaseCoordinator(log, node_id="other", ttl_s=60, wait_s=0.3, clock=lambda: now[0])
    with stalled.hold([(group_id, "s")]):
        with pytest.raises(SessionBusyError) as busy:
            with other.hold([(group_id, "s")]):
                pass
        assert busy.value.status_code == 503 and busy.value.retry_after >= 1
        now[0] += 61  # past the stalled holder's expiry
        other_long = LeaseCoordinator(log, node_id="other", ttl_s=60, wait_s=5, clock=lambda: now[0])
        with other_long.hold([(group_id, "s")]):
            with pytest.raises(LeaseLostError):
                stalled.verify([(group_id, "s")])
            other_long.verify([(group_id, "s")])
        other_long.close()
    other.close()


# -- threads ------------------------------------------------------------------------------------------------


def test_threads_adding_and_flushing_one_session(make_service: Callable[..., Epimem], group_id: str) -> None:
    """Six threads send overlapping batches (retries included) and flush while the background
    worker forms episodes: every message ends in exactly one episode."""
    service = make_service(background=True, auto_flush_pending=8, episode_max_messages=6)
    total = 120
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(10):
                start = rng.randrange(0, total - 12)
                batch = [message(i) for i in range(start, start + rng.randint(1, 12))]
                service.add_messages(group_id, "s", batch)
                if rng.random() < 0.3:
                    service.add_messages(group_id, "s", batch)  # a retry
                if rng.random() < 0.2:
                    service.flush(group_id, "s")
        except BaseException as error:  # noqa: BLE001 - re-raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not errors, errors
    # Whatever the writers missed, add now (all duplicates of what they sent are no-ops).
    service.add_messages(group_id, "s", [message(i) for i in range(total)])
    assert service.wait_idle(60)
    service.flush(group_id, "s")
    expected = {"s": {m["id"]: m["content"] for m in (message(i) for i in range(total))}}
    assert_consistent(service, group_id, expected, flushed=True)


def test_two_servers_flushing_one_session(make_service: Callable[..., Epimem], group_id: str) -> None:
    """Two services on one store (what two servers on one Chroma server share), each with its own
    lease coordinator: overlapping batches land while the other one is forming. Without the lease
    (LocalCoordinator on each) this scenario puts messages into two episodes."""
    first = make_service(coordination="lease", auto_flush_pending=100, episode_max_messages=4)
    second = make_service(coordination="lease", auto_flush_pending=100, episode_max_messages=4, node_id="second")
    ids: set[int] = set()
    for r in range(3):
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def run(
            service: Epimem, offset: int, r: int = r, barrier: threading.Barrier = barrier, errors: list = errors
        ) -> None:
            try:
                batch = [message(i) for i in range(r * 20 + offset, r * 20 + offset + 14)]
                barrier.wait()
                time.sleep(0.03 * r * (offset > 0))
                service.add_messages(group_id, "s", batch)
                service.flush(group_id, "s")
            except BaseException as error:  # noqa: BLE001 - re-raised in the main thread
                errors.append(error)

        threads = [threading.Thread(target=run, args=pair) for pair in ((first, 0), (second, 6))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        ids |= {i for offset in (0, 6) for i in range(r * 20 + offset, r * 20 + offset + 14)}
    second.close()
    expected = {"s": {message(i)["id"]: message(i)["content"] for i in ids}}
    assert_consistent(first, group_id, expected, flushed=True)


class _BlockedGenerator(OfflineEpisodeGenerator):
    """Offline episodes, but each waits until the test lets it go (a slow LLM)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        self.started.set()
        assert self.release.wait(600)  # far longer than the test waits for the add: an add it held would show
        return super().generate(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)


def test_a_slow_formation_does_not_delay_adds(make_service: Callable[..., Epimem], group_id: str) -> None:
    """Adds take their own lock: a formation holding the session (e.g. on a slow LLM) does not block them."""
    generator = _BlockedGenerator()
    service = make_service(generator=generator)
    service.add_messages(group_id, "s", [message(i) for i in range(3)])
    flush = threading.Thread(target=service.flush, args=(group_id, "s"))
    flush.start()
    try:
        assert generator.started.wait(60), "the formation should be generating (holding the session)"
        receipts: list[Any] = []
        later = [message(i) for i in range(3, 6)]
        adder = threading.Thread(target=lambda: receipts.append(service.add_messages(group_id, "s", later)))
        adder.start()
        adder.join(300)  # bounded by the add's own work: the formation it would wait for is held until after
        assert not adder.is_alive(), "the add waited for the formation"
    finally:
        generator.release.set()
        flush.join(60)
    assert receipts[0].accepted == [message(i)["id"] for i in range(3, 6)]


# -- processes ---------------------------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path[:0] = [os.environ["EPIMEM_TEST_ROOT"], os.path.join(os.environ["EPIMEM_TEST_ROOT"], "tests")]
    from api.facade import Epimem
    from helpers.builders import message
    group, offset, rounds, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    service = Epimem.from_settings(background=True)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.02)
    for r in range(rounds):
        batch = [message(i) for i in range(r * 20 + offset, r * 20 + offset + 14)]
        time.sleep(0.05 * r * (offset > 0))  # land inside the other's formation, at varying points
        service.add_messages(group, "s", batch)
        service.add_messages(group, "s", batch[::2])  # a retry
        service.flush(group, "s")
    service.wait_idle(120)
    service.close()
    print("done", flush=True)
    """
)


@pytest.mark.slow
def test_processes_adding_and_flushing_one_session(chroma_server: Any, tmp_path: Path, embedder: Any) -> None:
    """Two server processes on one Chroma server add overlapping batches to one session and flush
    it at the same moment, round after round. Without the formation lease (run with
    EPIMEM_TEST_COORDINATION=local) they cut different snapshots and messages land in two episodes."""
    group_id = f"group-{uuid.uuid4().hex[:12]}"
    rounds = 3
    go = tmp_path / "go"
    env = {
        **os.environ,
        "EPIMEM_TEST_ROOT": str(ROOT),
        "EPIMEM_DATA_DIR": str(tmp_path / "data"),
        "EPIMEM_CHROMA_HOST": "127.0.0.1",
        "EPIMEM_CHROMA_PORT": str(chroma_server.port),
        "EPIMEM_AUTO_FLUSH_PENDING": "5",
        "EPIMEM_EPISODE_MAX_MESSAGES": "4",
        "HF_HUB_OFFLINE": "1",
        "EPIMEM_COORDINATION": os.environ.get("EPIMEM_TEST_COORDINATION", "auto"),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, group_id, str(offset), str(rounds), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for offset in (0, 6)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", process.stderr.read() if process.stderr else ""
        go.touch()
        for process in processes:
            out, err = process.communicate(timeout=240)
            assert process.returncode == 0 and "done" in out, err[-3000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    service = Epimem.from_settings(
        background=False,
        embedder=embedder,
        data_dir=tmp_path / "check",
        chroma_host="127.0.0.1",
        chroma_port=chroma_server.port,
    )
    ids = sorted({i for r in range(rounds) for offset in (0, 6) for i in range(r * 20 + offset, r * 20 + offset + 14)})
    expected = {"s": {message(i)["id"]: message(i)["content"] for i in ids}}
    assert_consistent(service, group_id, expected, flushed=True)
    service.close()


# -- the stateful model ---------------------------------------------------------------------------------------

SESSIONS = ("s1", "s2")


class IngestMachine(RuleBasedStateMachine):
    """add / retry / conflicting add / flush / delete-session against a dictionary model."""

    service: Epimem

    def __init__(self) -> None:
        super().__init__()
        self.group_id = f"group-{uuid.uuid4().hex[:12]}"
        self.model: dict[str, dict[str, str]] = {s: {} for s in SESSIONS}
        self.flushed = True

    @initialize()
    def fresh_group(self) -> None:
        self.service.add_messages(self.group_id, "s1", [message(0, session="s1")])
        self.model["s1"][message(0, session="s1")["id"]] = message(0, session="s1")["content"]
        self.flushed = False

    def send(self, session: str, batch: list[dict[str, Any]]) -> None:
        """Add ``batch`` and check the receipt against the model: a known id with other content refuses the whole
        batch (the invariant then checks that nothing of it was stored); otherwise what the model knows (with the
        same content) is a duplicate and the rest is accepted."""
        known = self.model[session]
        if any(m["id"] in known and known[m["id"]] != m["content"] for m in batch):
            with pytest.raises(ConflictError):
                self.service.add_messages(self.group_id, session, batch)
            return
        receipt = self.service.add_messages(self.group_id, session, batch)
        assert sorted(receipt.accepted) == sorted(m["id"] for m in batch if m["id"] not in known)
        assert sorted(receipt.duplicates) == sorted(m["id"] for m in batch if m["id"] in known)
        known.update({m["id"]: m["content"] for m in batch})
        self.flushed = self.flushed and not receipt.accepted

    @rule(session=st.sampled_from(SESSIONS), indices=st.lists(st.integers(0, 40), min_size=1, max_size=14, unique=True))
    def add(self, session: str, indices: list[int]) -> None:
        self.send(session, [message(i, session=session) for i in indices])

    @rule(session=st.sampled_from(SESSIONS), index=st.integers(0, 40), fresh=st.integers(41, 60))
    def conflicting_add(self, session: str, index: int, fresh: int) -> None:
        """An edited message: refused with its whole batch when its id is known with other content; when the id is
        unknown, both are simply added (and the edited content is then the one a later add must match)."""
        self.send(session, [message(index, session=session, variant=" (edited)"), message(fresh, session=session)])

    @rule(session=st.sampled_from(SESSIONS))
    def flush(self, session: str) -> None:
        episodes = self.service.flush(self.group_id, session)
        assert all(e.session_id == session and e.group_id == self.group_id for e in episodes)
        assert self.service.pending_messages(self.group_id, session) == 0

    @rule()
    def flush_all(self) -> None:
        for session in SESSIONS:
            self.service.flush(self.group_id, session)
        self.flushed = True

    @rule(session=st.sampled_from(SESSIONS))
    def delete_session(self, session: str) -> None:
        self.service.delete_session(self.group_id, session)
        self.model[session] = {}

    @invariant()
    def consistent(self) -> None:
        assert_consistent(self.service, self.group_id, self.model, flushed=self.flushed)


def test_stateful_ingest_flush_delete(service: Epimem) -> None:
    """Hypothesis drives random add/flush/delete sequences; the store always matches the model.

    12 sequences of 12 steps (EPIMEM_STATEFUL_EXAMPLES, EPIMEM_STATEFUL_STEPS for longer runs by hand), the same
    ones every run (derandomize). No health check is suppressed: none fires (drawing the steps is cheap; the store
    calls are the test's own time, which ``deadline=None`` leaves unbounded)."""
    IngestMachine.service = service
    machine = IngestMachine.TestCase
    machine.settings = settings(
        max_examples=int(os.environ.get("EPIMEM_STATEFUL_EXAMPLES", "12")),
        stateful_step_count=int(os.environ.get("EPIMEM_STATEFUL_STEPS", "12")),
        deadline=None,
        derandomize=True,
    )
    machine().runTest()
