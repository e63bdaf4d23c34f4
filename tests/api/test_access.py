"""The parts keys and limits are made of, on their own (a real store where they keep something): secrets and
their hashes, the bound on checks of wrong secrets, rate buckets under a clock the test moves, and shared
counters written by two processes' worth of counters over one store, with a recount between them."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import ChromaServer

from api.access import secrets
from api.access.counters import SharedCounters
from api.access.rates import RateLimiter
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.store.usage import CounterId, UsageStore


def test_a_secret_is_kept_as_a_salted_hash_and_names_its_key() -> None:
    key_id = secrets.new_key_id()
    secret = secrets.new_secret(key_id)
    assert secrets.key_id_of(secret) == key_id
    first, second = secrets.hash_secret(secret), secrets.hash_secret(secret)
    assert first != second and secret not in first and secret.split("_", 2)[2] not in first  # salted, one-way
    assert secrets.verify(secret, first) and secrets.verify(secret, second)
    assert not secrets.verify(secret + "x", first) and not secrets.verify(secret, "scrypt$broken")
    file_key = "a-long-random-secret-from-a-file"
    assert secrets.key_id_of(file_key).startswith("key-") and secrets.key_id_of(file_key) != key_id


def test_wrong_secrets_for_one_id_cost_at_most_a_few_hash_checks_a_second() -> None:
    now = [0.0]
    verified = secrets.Verified(clock=lambda: now[0])
    right = "a-long-random-secret-number-one"
    stored = secrets.hash_secret(right)
    for attempt in range(secrets.FAILED_CHECKS_PER_S):
        assert not verified.check("key-1", f"wrong-guess-{attempt:020d}", stored)
    assert not verified.check("key-1", right, stored)  # over the bound within this second: refused unchecked
    assert verified.check("key-2", right, stored)  # another id is not affected
    now[0] += 1.0
    assert verified.check("key-1", right, stored)  # a second later it is checked, and passes
    assert verified.known("key-1", right, stored) and verified.known("key-1", "other", stored) is False


def test_rate_buckets_hold_a_second_of_their_rate_and_take_from_all_or_none() -> None:
    now = [100.0]
    rates = RateLimiter(clock=lambda: now[0])
    key, group = ("key", "k"), ("group", "g")
    assert [rates.take([(key, 2.0)]) for _ in range(2)] == [None, None]
    refused = rates.take([(key, 2.0)])
    assert refused is not None and refused[0] == 0 and refused[1] == pytest.approx(0.5)
    now[0] += 0.5
    assert rates.take([(group, 1.0), (key, 2.0)]) is None  # one token each
    refused = rates.take([(group, 1.0), (key, 2.0)])
    assert refused is not None and refused[0] == 0  # the group is out: the key's token is not taken either
    now[0] += 0.5
    assert rates.take([(key, 2.0)]) is None and rates.take([(group, 1.0)]) is not None  # 0.5 s of 1/s: half
    assert rates.take([(("key", "slow"), 0.5)]) is None and rates.take([(("key", "slow"), 0.5)]) is not None


@pytest.mark.slow
def test_shared_counters_sum_every_process_and_survive_a_recount(
    chroma_server: ChromaServer, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """Two servers' counters (two connections, two run ids) over one Chroma server."""
    services = [
        Epimem.from_settings(
            Settings(data_dir=tmp_path / name, chroma_host="127.0.0.1", chroma_port=chroma_server.port),
            background=False,
            embedder=embedder,
        )
        for name in ("a", "b")
    ]
    try:
        counted_across(services[0].memory.store.usage, services[1].memory.store.usage, uuid.uuid4().hex)
    finally:
        for service in services:
            service.close()


def counted_across(first: UsageStore, second: UsageStore, group: str) -> None:
    assert first.run_id != second.run_id
    now = [0.0]
    one = SharedCounters(first, refresh_s=10.0, clock=lambda: now[0])
    other = SharedCounters(second, refresh_s=10.0, clock=lambda: now[0])
    counter = CounterId("messages", "group", group, "2030-01-01")
    assert one.totals([counter]) == {counter: 0}
    one.add(counter, 3)
    other.add(counter, 4)
    other.flush()
    assert one.totals([counter]) == {counter: 3}  # read less than refresh_s ago: the other's count is not seen yet
    now[0] += 10.0
    assert one.totals([counter]) == {counter: 7} and other.totals([counter]) == {counter: 7}
    assert one.period("2030-01-01")[counter] == 7

    chars = CounterId("chars", "group", group, "all")
    assert one.totals([chars], measure=lambda _: 100) == {chars: 100}  # never measured: recounted first
    other.add(chars, 20)
    other.flush()
    now[0] += 10.0
    assert one.totals([chars], measure=lambda _: -1) == {chars: 120}  # measured already: no recount
    one.forget(chars)  # a deletion on this server
    assert one.due() == [chars]
    one.recount(chars, 50)
    now[0] += 10.0
    assert other.totals([chars]) == {chars: 50}  # the recount's generation: the other's older count is dropped
    other.add(chars, 5)
    other.flush()
    now[0] += 10.0
    assert one.totals([chars]) == {chars: 55} and one.due() == []


class _WriteHeldOpen:
    """A ``UsageRecords`` whose first write lands in the store and then waits, as a flush does when another
    thread of the same server reads the counter between its write and its bookkeeping."""

    def __init__(self, records: UsageStore) -> None:
        self._records = records
        self.landed = threading.Event()
        self.release = threading.Event()
        self._held = False

    def write(self, counts: Any) -> None:
        self._records.write(counts)
        if not self._held:
            self._held = True
            self.landed.set()
            assert self.release.wait(60)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)


def test_a_flush_beside_a_read_does_not_count_this_server_twice(service: Epimem) -> None:
    records = _WriteHeldOpen(service.memory.store.usage)
    counters = SharedCounters(records, refresh_s=0.0)  # type: ignore[arg-type]
    counter = CounterId("messages", "key", uuid.uuid4().hex, "2030-01-01")
    counters.add(counter, 3)
    background = threading.Thread(target=counters.flush)  # the periodic flush
    background.start()
    try:
        assert records.landed.wait(60)  # its write is in the store; its bookkeeping is not done
        assert counters.totals([counter]) == {counter: 3}  # a limit check in between
    finally:
        records.release.set()
        background.join(60)
    assert counters.totals([counter]) == {counter: 3}
    counters.add(counter, 2)
    assert counters.totals([counter]) == {counter: 5}
