"""Retention with proof: a group's (or a session's) policy, a sweep that erases what is past it as a delete
would (an episode all of whose messages expired removed, one partly expired formed again from the rest,
summaries rebuilt), a dry run that lists the same and changes nothing, a receipt in the audit trail with
counts and erased ids, the bytes gone from the data folder, and the background sweep. Time is passed in
(``now``), never waited for."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.builders import REFERENCE, T0, chat, messages, two_episode_session
from helpers.checks import cached_keyword_text, every_client, scan_client

from api.facade import Epimem
from memory.errors import InvalidInputError
from memory.ids import GROUP_SUMMARY_SESSION
from memory.lifecycle.audit import ERASED, MAX_TARGETS, AuditAction
from memory.timeutil import utc_now

DAY = timedelta(days=1)


def _seed(service: Epimem, group_id: str, marker: str) -> dict[str, str]:
    """s1: episodes A (day 0, with the marker) and B (day 1); s3: one episode C of four messages ten minutes
    apart (day 2); s2: two episodes (day 10). A group summary cites them all. Returns the episode ids."""
    service.add_messages(group_id, "s1", chat("s1-a", 2, start=T0, marker=marker) + chat("s1-b", 2, start=T0 + DAY))
    a, b = service.flush(group_id, "s1")
    service.add_messages(group_id, "s3", messages(4, prefix="s3-", start=T0 + 2 * DAY, gap=timedelta(minutes=10)))
    (c,) = service.flush(group_id, "s3")
    two_episode_session(service, group_id, "s2", day=10)
    (summary,) = service.generate_summaries(
        group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE
    )
    return {"A": a.uuid, "B": b.uuid, "C": c.uuid, "summary": summary.uuid}


def _view(service: Epimem, group_id: str) -> tuple:
    timeline = [(e.uuid, e.source_message_ids, e.content) for e in service.timeline(group_id, limit=500).episodes]
    history = {s: [m.id for m in service.history(group_id, s)] for s in ("s1", "s2", "s3")}
    return timeline, history


@pytest.mark.slow
def test_a_sweep_erases_what_is_past_the_policy_and_repairs_the_rest(service: Epimem, group_id: str) -> None:
    marker = f"zq{uuid.uuid4().hex[:10]}"
    ids = _seed(service, group_id, marker)
    service.search(group_id, "hiking with the dog", k=5)  # the keyword cache holds the marker
    assert marker in cached_keyword_text(service)
    stored = service.set_retention(group_id, {"max_age_days": 30})
    assert stored.max_age_days == 30 and stored.by.value == "timestamp" and stored.session_id is None
    now = T0 + 2 * DAY + timedelta(minutes=15) + 30 * DAY  # the cutoff falls inside C
    expired = ["s1-a-0", "s1-a-1", "s1-b-0", "s1-b-1", "s3-0", "s3-1"]

    before = _view(service, group_id)
    preview = service.sweep_retention(group_id, now=now, dry_run=True)
    assert preview.dry_run and _view(service, group_id) == before  # nothing changed
    assert sorted(preview.messages) == expired and sorted(preview.sessions) == ["s1", "s3"]
    assert sorted(preview.episodes) == sorted([ids["A"], ids["B"]])
    assert sorted(preview.repaired) == sorted([ids["C"], ids["summary"]]) and preview.summaries == []
    assert preview.counts == {"sessions": 2, "messages": 6, "episodes": 2, "summaries": 0, "repaired": 2}

    receipt = service.sweep_retention(group_id, now=now, actor="ops")
    assert not receipt.dry_run
    for field in ("messages", "episodes", "summaries", "repaired", "sessions"):
        assert sorted(getattr(receipt, field)) == sorted(getattr(preview, field)), field
    assert receipt.counts == preview.counts

    # Gone from every answer.
    assert service.history(group_id, "s1") == []
    assert [m.id for m in service.history(group_id, "s3")] == ["s3-2", "s3-3"]
    assert len(service.history(group_id, "s2")) == 4
    c = service.get_episode(group_id, "s3", ids["C"])  # formed again from what remains, same id
    assert c.source_message_ids == ("s3-2", "s3-3") and c.message_count == 2
    summary = service.get_episode(group_id, GROUP_SUMMARY_SESSION, ids["summary"])
    assert ids["A"] not in summary.source_episode_ids and ids["C"] in summary.source_episode_ids
    assert not set(expired) & set(summary.source_message_ids)
    timeline = service.timeline(group_id, limit=500).episodes
    assert not {ids["A"], ids["B"]} & {e.uuid for e in timeline}
    assert all(marker not in h.episode.content for h in service.search(group_id, marker, k=20))
    assert marker not in service.context(group_id, f"code word {marker}", token_budget=500).text
    export = "".join(service.export_group(group_id))
    assert marker not in export and not any(f'"{m}"' in export for m in expired)
    assert marker not in cached_keyword_text(service)
    # The receipt in the audit trail: the sweep, who, how many of each kind and which ids (never content);
    # the entries of the adds and flushes that named the erased ids read "(erased)".
    entries = service.audit(group_id, limit=500).entries
    (entry,) = [e for e in entries if e.action is AuditAction.RETENTION_SWEEP]
    assert entry.actor == "ops" and entry.counts == receipt.counts and entry.ids_left_out == 0
    assert {kind: sorted(ids) for kind, ids in entry.ids.items()} == {
        kind: sorted(getattr(receipt, kind)) for kind in receipt.counts
    }
    assert sorted(entry.target_ids) == ["s1", "s3"] and entry.target_count == 2
    others = [e for e in entries if e is not entry]
    assert not set(expired) & {i for e in others for i in e.target_ids}
    assert ERASED in {i for e in others for i in e.target_ids}
    assert marker not in json.dumps([e.model_dump(mode="json") for e in entries])
    # ... and from every collection of the store: the erased ids are left only in that receipt.
    needles = [marker, ids["A"], ids["B"]]
    found = scan_client(every_client(service), needles, local=expired, group_id=group_id)
    assert {(record, needle) for _, record, needle in found} == {(entry.id, i) for i in [ids["A"], ids["B"], *expired]}

    again = service.sweep_retention(group_id, now=now)  # nothing left to erase: no second entry
    assert again.counts["messages"] == 0 and again.sessions == []
    assert len([e for e in service.audit(group_id, limit=500).entries if e.action is AuditAction.RETENTION_SWEEP]) == 1


def test_arrival_time_and_a_sessions_own_policy(service: Epimem, group_id: str) -> None:
    service.add_messages(group_id, "s1", chat("s1", 2, start=T0))
    service.add_messages(group_id, "s2", chat("s2", 2, start=T0))
    service.set_retention(group_id, {"max_age_days": 1, "by": "arrival"})
    service.set_retention(group_id, {"max_age_days": 30, "by": "arrival"}, session_id="s2")
    policies = service.retention(group_id)
    assert policies.group is not None and policies.group.by.value == "arrival"
    assert [(p.session_id, p.max_age_days) for p in policies.sessions] == [("s2", 30)]

    # By their own timestamps (2023) both would be long gone; by arrival they are minutes old.
    assert service.sweep_retention(group_id, now=utc_now()).counts["messages"] == 0
    later = utc_now() + 2 * DAY
    receipt = service.sweep_retention(group_id, now=later)
    assert sorted(receipt.messages) == ["s1-0", "s1-1"]  # pending messages too (no episode yet)
    assert service.history(group_id, "s1") == [] and len(service.history(group_id, "s2")) == 2

    assert service.clear_retention(group_id, session_id="s2") is True
    assert service.clear_retention(group_id, session_id="s2") is False
    assert sorted(service.sweep_retention(group_id, now=later).messages) == ["s2-0", "s2-1"]
    assert service.clear_retention(group_id) is True
    assert service.retention(group_id).group is None


def test_policies_are_checked(service: Epimem, group_id: str) -> None:
    for bad in ({"max_age_days": 0}, {"max_age_days": -1}, {"max_age_days": 1e9}, {"max_age_days": 1, "by": "x"}):
        with pytest.raises(InvalidInputError):
            service.set_retention(group_id, bad)
    with pytest.raises(InvalidInputError):
        service.set_retention(group_id, {"max_age_days": 1, "extra": True})


def test_the_background_sweep(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service(background=True, retention_sweep_interval_s=0.2)
    service.add_messages(group_id, "s1", chat("s1", 3, start=T0))
    service.set_retention(group_id, {"max_age_days": 30})  # T0 is 2023: long past
    deadline = time.monotonic() + 60
    while not (swept := [e for e in service.audit(group_id).entries if e.action is AuditAction.RETENTION_SWEEP]):
        assert time.monotonic() < deadline, "the background sweep did not run"
        time.sleep(0.05)
    assert swept[0].actor == "retention" and swept[0].counts["messages"] == 3
    assert sorted(swept[0].ids["messages"]) == ["s1-0", "s1-1", "s1-2"]
    assert service.history(group_id, "s1") == []


@pytest.mark.slow
def test_a_sweep_leaves_no_byte_in_the_data_folder(tmp_path: Path, embedder: object, group_id: str) -> None:
    """Embedded Chroma: after a sweep (and with the service stopped) no file holds the expired text."""
    marker = f"zq{uuid.uuid4().hex[:10]}"
    service = Epimem.from_settings(data_dir=tmp_path / "data", background=False, embedder=embedder)
    try:
        _seed(service, group_id, marker)
        service.set_retention(group_id, {"max_age_days": 30})
        receipt = service.sweep_retention(group_id, now=T0 + 2 * DAY + timedelta(minutes=15) + 30 * DAY)
        assert receipt.counts["messages"] == 6
    finally:
        service.close()
    # No byte of what was said (the erased ids are in the sweep's receipt, on purpose: the proof).
    found = [
        str(path) for path in (tmp_path / "data").rglob("*") if path.is_file() and marker.encode() in path.read_bytes()
    ]
    assert found == []
    reopened = Epimem.from_settings(data_dir=tmp_path / "data", background=False, embedder=embedder)
    try:
        assert reopened.history(group_id, "s1") == []
        assert json.loads(next(iter(reopened.export_group(group_id))))["group_id"] == group_id
    finally:
        reopened.close()


def test_a_receipt_keeps_at_most_the_cap_of_each_kind_and_forgets_a_session_deleted_later(
    service: Epimem, group_id: str
) -> None:
    many = [f"m{i}" for i in range(MAX_TARGETS + 7)]
    trail = service.memory.audit
    trail.record(
        group_id, AuditAction.RETENTION_SWEEP, "ops", targets=["s1"], receipt={"messages": many, "sessions": ["s1"]}
    )
    service.add_messages(group_id, "s1", chat("s1", 2, start=T0))
    service.delete_session(group_id, "s1")
    (entry,) = [e for e in service.audit(group_id).entries if e.action is AuditAction.RETENTION_SWEEP]
    assert entry.counts == {"messages": MAX_TARGETS + 7, "sessions": 1} and entry.ids_left_out == 7
    assert entry.ids["messages"] == many[:MAX_TARGETS]
    assert entry.ids["sessions"] == [ERASED] and entry.target_ids == [ERASED]  # the session was deleted since
