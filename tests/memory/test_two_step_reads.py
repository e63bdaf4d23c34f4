"""A big group read from Chroma is read in two steps (memory.readmodel.build): the first read waits only
for its columns, the vectors and messages follow in the background and replace the deferred snapshot,
brought forward with the writes that landed meanwhile; deletes made meanwhile never come back; a cache that
closes meanwhile stops the read and keeps no file of the deferred snapshot. Both backends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from helpers.builders import T0, chat, two_episode_session
from helpers.checks import Direction, answers

from api.facade import Epimem
from memory.readmodel import model as snapshots_module
from memory.readmodel.files import FOLDER
from retrieval.keyword import KEYWORDS

QUERIES = ["what did they say about the garden", "message 2", "tomatoes"]


class Gate:
    """Holds the background read (``read_snapshot`` with ``cancelled``) before or after it reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, after: bool) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        real = snapshots_module.read_snapshot

        def gated(*args: Any, **kwargs: Any) -> Any:
            background = kwargs.get("cancelled") is not None
            if background and not after:
                self.reached.set()
                assert self.release.wait(30)
            snapshot = real(*args, **kwargs)
            if background and after:
                self.reached.set()
                assert self.release.wait(30)
            return snapshot

        monkeypatch.setattr(snapshots_module, "read_snapshot", gated)


@pytest.fixture
def two_step(make_service: Callable[..., Epimem]) -> Iterator[Epimem]:
    service = make_service()
    service.read_model.two_step_records = 1  # every group counts as big
    yield service


def _filled(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=3)
    service.add_messages(group_id, "s3", chat("open", 3, start=T0 + timedelta(days=20)))  # never flushed
    # The writes may have set the snapshot follower going (a background build of the group's snapshot), and a read
    # of a deferred snapshot a background read: both end before a test forgets the group, or what they read could
    # be installed after the forget.
    assert service.read_model.wait_followed(30)
    service.read_model.wait_upgrades(30)


def _read_whole(service: Epimem, group_id: str) -> Any:
    """The group's snapshot read again in one step (what the upgrade must equal)."""
    snapshots = service.read_model
    assert snapshots.wait_followed(30)
    snapshots.two_step_records = None
    snapshots.forget(group_id)
    return service.read_model.snapshot(group_id)


def _same_rows(one: Any, two: Any) -> None:
    assert sorted(one.ids) == sorted(two.ids)
    assert one.full == two.full and set(one.messages or {}) == set(two.messages or {})
    for record_id in two.ids:
        assert one.documents[one.positions[record_id]] == two.documents[two.positions[record_id]]
        # Within float32 rounding: a patched row holds the vector as written, a read one what Chroma returns.
        assert Direction(one.direction(record_id)) == Direction(two.direction(record_id))


def test_the_first_read_waits_for_the_columns_only(
    two_step: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _filled(two_step, group_id)
    snapshots = two_step.read_model
    expected = answers(two_step, group_id, QUERIES)  # from the snapshot the writes patched
    snapshots.wait_upgrades(30)
    snapshots.forget(group_id)
    gate = Gate(monkeypatch, after=False)
    assert answers(two_step, group_id, QUERIES) == expected  # columns only: the rest read from Chroma per request
    first = two_step.read_model.snapshot(group_id)
    assert first.deferred and first.directions is None and first.messages is None
    assert gate.reached.wait(30)
    gate.release.set()
    snapshots.wait_upgrades(30)
    upgraded = two_step.read_model.snapshot(group_id)
    assert not upgraded.deferred and upgraded.full and upgraded.directions is not None and upgraded.messages
    assert upgraded.has(KEYWORDS.key)  # the columns' keyword index carried over, not built again
    assert answers(two_step, group_id, QUERIES) == expected
    _same_rows(upgraded, _read_whole(two_step, group_id))


def test_writes_during_the_background_read_are_applied_to_it(
    two_step: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background read ends before the writes; it is installed after them, brought forward."""
    _filled(two_step, group_id)
    snapshots = two_step.read_model
    snapshots.forget(group_id)
    gate = Gate(monkeypatch, after=True)
    two_step.search(group_id, "garden", k=3)
    assert gate.reached.wait(30)  # read whole, not installed yet
    two_step.add_messages(group_id, "s3", chat("late", 2, start=T0 + timedelta(days=21), marker="zucchini"))
    two_step.flush(group_id, "s2")
    gate.release.set()
    snapshots.wait_upgrades(30)
    upgraded = snapshots.cached(group_id)
    assert upgraded is not None and not upgraded.deferred and upgraded.directions is not None
    assert any("zucchini" in message.content for message in (upgraded.messages or {}).values())
    _same_rows(upgraded, _read_whole(two_step, group_id))


def test_a_delete_during_the_background_read_never_comes_back(
    two_step: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _filled(two_step, group_id)
    two_step_session_marker = "okra"
    two_episode_session(two_step, group_id, "gone", day=9, marker=two_step_session_marker)
    snapshots = two_step.read_model
    snapshots.forget(group_id)
    gate = Gate(monkeypatch, after=True)
    two_step.search(group_id, "garden", k=3)
    assert gate.reached.wait(30)  # read whole (the session included), not installed yet
    assert two_step.delete_session(group_id, "gone").episodes
    gate.release.set()
    snapshots.wait_upgrades(30)
    for _ in range(2):  # whatever the cache holds now, and after the read it may have started again
        cached = snapshots.cached(group_id)
        if cached is not None:
            assert all(cached.session_names[int(code)] != "gone" for code in cached.session_codes)
            assert not any(two_step_session_marker in text for text in cached.documents)
            assert not any(two_step_session_marker in m.content for m in (cached.messages or {}).values())
        assert two_step_session_marker not in two_step.context(group_id, "code word", token_budget=500).text
        snapshots.wait_upgrades(30)


def test_a_close_stops_the_background_read_and_keeps_no_file_of_it(
    make_service: Callable[..., Epimem], group_id: str, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    service = make_service()
    snapshots = service.read_model
    _filled(service, group_id)
    snapshots.forget(group_id)
    snapshots.two_step_records = 1
    gate = Gate(monkeypatch, after=False)
    service.search(group_id, "garden", k=3)
    assert gate.reached.wait(30)
    closing = threading.Thread(target=service.close)
    closing.start()
    gate.release.set()  # the read starts, sees the cache closing at its first page and stops
    closing.join(60)
    assert not closing.is_alive()
    if backend == "embedded":
        assert not list((service.settings.data_dir / FOLDER).glob("*.snap"))
    again = make_service()
    assert again.search(group_id, "garden", k=3)
    assert again.stats().read_cache is not None and again.stats().read_cache.loads == 0
