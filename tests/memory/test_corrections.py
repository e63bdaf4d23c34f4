"""Correcting memory in process, on both Chroma backends: episodes corrected with their history (and what
re-forming does to it), messages redacted, export and import of histories, the audit trail."""

from __future__ import annotations

import json
import uuid

import pytest
from helpers.builders import REFERENCE, T0, chat, turns
from helpers.embedders import ProjectedEmbedder

from api.facade import Epimem
from memory.errors import InvalidInputError, NotFoundError
from memory.lifecycle.audit import ERASED, AuditAction, AuditTrail
from memory.lifecycle.editing import REDACTED_MARK
from memory.lifecycle.revisions import RevisionKind
from memory.models import EpisodeType

LINES = [
    ("ana", "We booked the cabin by the lake for the first week of July."),
    ("ben", "Great, I will bring the kayak and the fishing rods."),
    ("ana", "My locker code is {secret}, grab the tent from there."),
    ("ben", "Got it, I will pick up the tent on Friday."),
]


def _word() -> str:
    return f"zq{uuid.uuid4().hex[:10]}"


def _seed(service: Epimem, group: str, session: str = "trip", secret: str = "") -> str:
    lines = [(who, text.format(secret=secret or "4411")) for who, text in LINES]
    service.add_messages(group, session, turns(lines, start=T0))
    formed = service.flush(group, session)
    assert len(formed) == 1
    return formed[0].uuid


def _texts(service: Epimem, group: str, query: str) -> str:
    hits = service.search(group, query, k=10)
    context = service.context(group, query, token_budget=2000)
    timeline = service.timeline(group, limit=100).episodes
    parts = [h.episode.title + h.episode.content for h in hits] + [context.text]
    return " ".join(parts + [e.title + e.content for e in timeline])


def test_correct_an_episode_keeps_its_history_and_its_sources(service: Epimem, group_id: str) -> None:
    episode_id = _seed(service, group_id)
    before = service.get_episode(group_id, "trip", episode_id)
    sources = [(m.id, m.content) for m in service.history(group_id, "trip")]
    fresh = _word()
    corrected = service.correct_episode(
        group_id,
        "trip",
        episode_id,
        title=f"Cabin trip {fresh}",
        content=f"Ana and Ben plan the cabin trip; Ben brings the canoe {fresh}.",
        user_metadata={"checked": True},
        reason="kayak was a canoe",
        actor="editor-key",
    )
    assert corrected.title == f"Cabin trip {fresh}" and corrected.user_metadata == {"checked": True}
    assert corrected.uuid == episode_id and corrected.source_message_ids == before.source_message_ids
    # at once: stored, searchable by the new words, not by the words it replaced
    assert service.get_episode(group_id, "trip", episode_id).content == corrected.content
    hits = service.search(group_id, f"canoe {fresh}", k=3)
    assert hits and hits[0].episode.uuid == episode_id and fresh in hits[0].episode.content
    assert all(before.content != h.episode.content for h in service.search(group_id, before.title, k=10))
    timeline = service.timeline(group_id, limit=10).episodes
    assert [e.title for e in timeline] == [corrected.title]
    assert [(m.id, m.content) for m in service.history(group_id, "trip")] == sources  # never changed

    revisions = service.episode_revisions(group_id, "trip", episode_id)
    assert [(r.revision, r.kind) for r in revisions] == [(0, RevisionKind.GENERATED), (1, RevisionKind.CORRECTION)]
    assert (revisions[0].title, revisions[0].content) == (before.title, before.content)
    assert revisions[1].changed_by == "editor-key" and revisions[1].reason == "kayak was a canoe"
    assert revisions[1].content == corrected.content and revisions[1].changed_at >= revisions[0].changed_at

    # the same values again: no new revision; a second correction: revision 2 (only the title changes)
    service.correct_episode(group_id, "trip", episode_id, title=f"Cabin trip {fresh}")
    assert len(service.episode_revisions(group_id, "trip", episode_id)) == 2
    again = service.correct_episode(group_id, "trip", episode_id, title="Cabin trip, final")
    assert again.content == corrected.content
    assert [r.changed_by for r in service.episode_revisions(group_id, "trip", episode_id)] == [
        "epimem",
        "editor-key",
        "local",
    ]


def test_an_episode_never_corrected_has_its_generated_revision(service: Epimem, group_id: str) -> None:
    episode_id = _seed(service, group_id)
    episode = service.get_episode(group_id, "trip", episode_id)
    (only,) = service.episode_revisions(group_id, "trip", episode_id)
    assert (only.revision, only.kind, only.title, only.content) == (0, "generated", episode.title, episode.content)


def test_bad_corrections_are_refused(service: Epimem, group_id: str) -> None:
    episode_id = _seed(service, group_id)
    for bad in ({}, {"title": "  "}, {"content": ""}, {"title": "x" * 501}, {"reason": "why"}):
        with pytest.raises(InvalidInputError):
            service.correct_episode(group_id, "trip", episode_id, **bad)
    with pytest.raises(NotFoundError):
        service.correct_episode(group_id, "trip", "no-such-episode", title="t")
    with pytest.raises(NotFoundError):
        service.correct_episode(group_id, "other-session", episode_id, title="t")
    with pytest.raises(NotFoundError):
        service.episode_revisions(group_id, "trip", "no-such-episode")
    summaries = service.generate_summaries(
        group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE
    )
    assert summaries and summaries[0].episode_type is EpisodeType.SUMMARY
    with pytest.raises(InvalidInputError, match="summary"):
        service.correct_episode(group_id, summaries[0].session_id, summaries[0].uuid, title="t")
    assert len(service.episode_revisions(group_id, "trip", episode_id)) == 1


def test_re_forming_keeps_corrections(service: Epimem, group_id: str) -> None:
    """Sources unchanged (another episode forms in the session): the correction stays the episode. A
    source message deleted: the episode is made again and every earlier revision loses its text, the
    correction too (marked superseded: it could quote the deleted message); who changed what stays."""
    episode_id = _seed(service, group_id)
    generated = service.get_episode(group_id, "trip", episode_id)
    service.correct_episode(group_id, "trip", episode_id, title="Cabin trip (checked)", reason="title")
    later = chat("later", 2, start=T0.replace(year=2024), topic=1)
    service.add_messages(group_id, "trip", later)
    assert len(service.flush(group_id, "trip")) == 1
    assert service.get_episode(group_id, "trip", episode_id).title == "Cabin trip (checked)"

    service.delete_message(group_id, "trip", "m1")
    reformed = service.get_episode(group_id, "trip", episode_id)
    assert "m1" not in reformed.source_message_ids and reformed.title != "Cabin trip (checked)"
    revisions = service.episode_revisions(group_id, "trip", episode_id)
    assert [(r.revision, r.kind) for r in revisions] == [(0, "generated"), (1, "correction"), (2, "reformed")]
    assert (
        revisions[0].erased
        and revisions[0].content == ""
        and generated.content not in json.dumps([r.model_dump(mode="json") for r in revisions])
    )
    assert revisions[1].superseded and revisions[1].erased and (revisions[1].title, revisions[1].reason) == ("", None)
    assert (revisions[1].kind, revisions[1].changed_by) == ("correction", "local")
    assert revisions[2].title == reformed.title and revisions[2].reason == "source message m1 deleted"
    assert revisions[2].changed_by == "epimem"

    service.delete_episode(group_id, "trip", episode_id)  # the history goes with the episode
    with pytest.raises(NotFoundError):
        service.episode_revisions(group_id, "trip", episode_id)


def test_redaction_replaces_the_text_everywhere_and_is_idempotent(service: Epimem, group_id: str) -> None:
    secret = _word()
    episode_id = _seed(service, group_id, secret=secret)
    service.correct_episode(group_id, "trip", episode_id, content=f"Ana keeps the tent in locker {secret}.")
    service.generate_summaries(group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE)
    assert secret in _texts(service, group_id, f"locker code {secret}")

    receipt = service.redact_message(group_id, "trip", "m2", actor="admin-key")
    assert receipt.redacted and receipt.message_id == "m2" and receipt.episodes == [episode_id]
    assert receipt.summaries and receipt.caches
    (message,) = [m for m in service.history(group_id, "trip") if m.id == "m2"]
    assert message.content == "[redacted]" and message.producer_id == "ana"
    assert message.timestamp.isoformat().startswith("2023-05-08T13:02") and message.metadata[REDACTED_MARK] is True
    assert secret not in _texts(service, group_id, f"locker code {secret}")
    assert secret not in "".join(service.export_group(group_id))
    episode = service.get_episode(group_id, "trip", episode_id)
    assert "m2" in episode.source_message_ids and secret not in episode.content
    revisions = service.episode_revisions(group_id, "trip", episode_id)
    assert [r.kind for r in revisions] == ["generated", "correction", "redacted"]
    assert all(r.erased for r in revisions[:2]) and secret not in json.dumps(
        [r.model_dump(mode="json") for r in revisions]
    )

    again = service.redact_message(group_id, "trip", "m2", replacement="[gone]")
    assert not again.redacted and not again.episodes
    assert [m.content for m in service.history(group_id, "trip") if m.id == "m2"] == ["[redacted]"]
    assert len(service.episode_revisions(group_id, "trip", episode_id)) == 3
    with pytest.raises(NotFoundError):
        service.redact_message(group_id, "trip", "no-such-message")
    with pytest.raises(InvalidInputError):
        service.redact_message(group_id, "trip", "m1", replacement="   ")


def test_redacting_a_pending_message(service: Epimem, group_id: str) -> None:
    secret = _word()
    service.add_messages(group_id, "live", turns([("ana", f"the alarm code is {secret}")], start=T0))
    assert any(secret in h.episode.content for h in service.search(group_id, secret, k=3))
    receipt = service.redact_message(group_id, "live", "m0", replacement="(removed)")
    assert receipt.redacted and receipt.episodes == []
    assert not any(secret in h.episode.content for h in service.search(group_id, secret, k=3))
    (formed,) = service.flush(group_id, "live")
    assert secret not in formed.content and "(removed)" in service.history(group_id, "live")[0].content


def test_export_and_import_carry_revisions(service: Epimem, group_id: str) -> None:
    episode_id = _seed(service, group_id)
    service.correct_episode(group_id, "trip", episode_id, title="Cabin trip (checked)", reason="r", actor="k1")
    lines = list(service.export_group(group_id))
    end = json.loads(lines[-1])
    assert end["counts"]["revisions"] == 2
    copy = f"{group_id}-copy"
    service.import_group(lines, group_id=copy, actor="k2")
    assert service.episode_revisions(copy, "trip", episode_id) == service.episode_revisions(
        group_id, "trip", episode_id
    )
    assert service.get_episode(copy, "trip", episode_id).title == "Cabin trip (checked)"
    assert service.audit(copy).entries[0].action is AuditAction.IMPORT and service.audit(copy).entries[0].actor == "k2"
    truncated = [line for line in lines if '"type":"revision"' not in line]
    with pytest.raises(InvalidInputError, match="end record"):
        service.import_group(truncated, group_id=f"{group_id}-bad")


def test_the_audit_trail(service: Epimem, group_id: str) -> None:
    secret = _word()
    episode_id = _seed(service, group_id, secret=secret)
    service.correct_episode(group_id, "trip", episode_id, title=f"Title {secret}", reason=f"why {secret}", actor="ed")
    service.redact_message(group_id, "trip", "m2", actor="admin")
    service.redact_message(group_id, "trip", "m2", actor="admin")  # changed nothing: no entry
    service.delete_message(group_id, "trip", "m3", actor="admin")
    page = service.audit(group_id)
    actions = [(e.action.value, e.actor) for e in page.entries]
    assert actions == [
        ("delete_message", "admin"),
        ("redact", "admin"),
        ("correct", "ed"),
        ("flush", "local"),
        ("add", "local"),
    ]
    add = page.entries[-1]
    # the deleted message's id is erased from every entry, as from the data folder; the counts stay
    assert add.target_ids == ["m0", "m1", "m2", ERASED] and add.target_count == 4 and add.session_id == "trip"
    assert page.entries[0].target_ids == [ERASED] and page.entries[0].target_count == 1
    assert page.entries[2].target_ids == [episode_id] and page.entries[1].target_ids[:1] == ["m2"]
    assert secret not in page.model_dump_json()  # never the content, a title or a reason
    first = service.audit(group_id, limit=2)
    second = service.audit(group_id, limit=2, cursor=first.next_cursor)
    third = service.audit(group_id, limit=2, cursor=second.next_cursor)
    assert [e.id for e in first.entries + second.entries + third.entries] == [e.id for e in page.entries]
    assert third.next_cursor is None
    for bad in ({"limit": 0}, {"limit": 501}, {"cursor": "$where"}):
        with pytest.raises(InvalidInputError):
            service.audit(group_id, **bad)
    service.delete_group(group_id)
    with pytest.raises(NotFoundError):
        service.audit(group_id)
    service.add_messages(group_id, "again", turns([("ana", "hello again")], start=T0))
    assert [e.action.value for e in service.audit(group_id).entries] == ["add"]  # the old trail went with the group


def test_the_audit_trail_is_bounded(service: Epimem, group_id: str) -> None:
    trail = AuditTrail(service.memory.store.log, limit=5, prune_every=3)
    for i in range(9):
        trail.record(group_id, AuditAction.ADD, "k", targets=[f"m{i}"])
    page = trail.page(group_id, limit=100)
    assert 5 <= len(page.entries) <= 5 + 3 - 1
    assert page.entries[0].target_ids == ["m8"]
    trail.prune(group_id)
    assert [e.target_ids for e in trail.page(group_id).entries] == [[f"m{i}"] for i in range(8, 3, -1)]
    many = trail.record(group_id, AuditAction.ADD, "k", targets=[f"x{i}" for i in range(250)])
    assert len(many.target_ids) == 100 and many.target_count == 250


def test_a_model_change_keeps_corrections(service: Epimem, settings_for, embedder, group_id: str) -> None:
    """Re-embedding after a model change embeds the stored, corrected text: the correction stays the episode
    and is what search finds."""
    episode_id = _seed(service, group_id)
    fresh = _word()
    service.correct_episode(group_id, "trip", episode_id, content=f"Ben brings a canoe named {fresh}.")
    changed = Epimem.from_settings(settings_for(), background=False, embedder=ProjectedEmbedder(embedder))
    try:
        changed.reembed(group_id)
        assert changed.get_episode(group_id, "trip", episode_id).content == f"Ben brings a canoe named {fresh}."
        hits = changed.search(group_id, f"canoe named {fresh}", k=1)
        assert hits[0].episode.uuid == episode_id and fresh in hits[0].episode.content
        assert [r.kind.value for r in changed.episode_revisions(group_id, "trip", episode_id)] == [
            "generated",
            "correction",
        ]
        assert changed.audit(group_id).entries[0].action is AuditAction.REEMBED
    finally:
        changed.close()


def test_an_audit_entry_that_cannot_be_written_does_not_undo_the_change(
    service: Epimem, group_id: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log = service.memory.store.log

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the store failed right after the add")

    monkeypatch.setattr(log, "put_record", failing)
    receipt = service.add_messages(group_id, "s", turns([("ana", "hello there")], start=T0))
    assert receipt.accepted == ["m0"] and [m.id for m in service.history(group_id, "s")] == ["m0"]
    assert service.memory.audit.failures == 1 and "add entry not written" in caplog.text
    monkeypatch.undo()
    assert service.audit(group_id).entries == []
