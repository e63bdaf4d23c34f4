"""Backups while serving: a backup taken while a writer keeps adding restores into an empty folder, and every
read of the restored store (search, context, timeline, history, export, configurations, retention) equals the
source's at the backup's moment (captured while the group was held for the backup); what was erased before is
not in the file; a restore checks the whole file first and goes only into a store without those groups."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.builders import REFERENCE, T0, chat, two_episode_session

from api.facade import Epimem
from memory.errors import ConflictError, InvalidInputError
from memory.models import GroupConfiguration, SessionInfo

# Each test over about a second on a quiet core: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

QUERIES = ("hiking with the dog at Lake Tahoe", "pottery class vase", "kitten from the shelter", "road trip")


def reads(service: Epimem, group_id: str) -> dict[str, Any]:
    """Everything a client can read of a group, as plain values."""
    sessions = service.list_sessions(group_id)
    export = [json.loads(line) for line in service.export_group(group_id)]
    export[0].pop("exported_at")
    found: dict[str, Any] = {
        "group": service.get_group(group_id).model_dump(mode="json"),
        "sessions": [info.model_dump(mode="json") for info in sessions],
        "history": {
            i.session_id: [m.model_dump(mode="json") for m in service.history(group_id, i.session_id, limit=1000)]
            for i in sessions
        },
        "timeline": [e.model_dump(mode="json") for e in service.timeline(group_id, limit=500).episodes],
        "export": export,
        "retention": service.retention(group_id).model_dump(mode="json"),
    }
    for query in QUERIES:
        hits = service.search(group_id, query, k=10)
        found[f"search {query}"] = [(h.episode.model_dump(mode="json"), h.matched_message_ids) for h in hits]
        found[f"scores {query}"] = [h.score for h in hits]
        context = service.context(group_id, query, token_budget=400)
        found[f"context {query}"] = (context.text, [c.model_dump(mode="json") for c in context.citations])
    return found


def assert_same_reads(found: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal in every value; search scores to the sixth decimal (the source may score a hit from its read
    snapshot's vectors, the restored store from Chroma's distances: the same cosine in float32, ~1e-8 apart)."""
    scores = {key: found.pop(key) for key in list(found) if key.startswith("scores ")}
    expected = dict(expected)
    expected_scores = {key: expected.pop(key) for key in list(expected) if key.startswith("scores ")}
    assert found == expected
    assert scores.keys() == expected_scores.keys()
    for key, values in scores.items():
        assert values == pytest.approx(expected_scores[key], abs=1e-6), key


def _seed(service: Epimem, group_id: str) -> None:
    two_episode_session(service, group_id, "s1", day=0)
    two_episode_session(service, group_id, "s2", day=3)
    service.add_messages(group_id, "s3", chat("s3", 3, start=T0 + timedelta(days=6)))  # pending
    service.generate_summaries(group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE)
    episode = service.timeline(group_id, session_id="s1").episodes[0]
    service.correct_episode(group_id, "s1", episode.uuid, title="Corrected title", reason="typo")
    service.put_group(GroupConfiguration(group_id=group_id, description="the family"))
    service.put_session(SessionInfo(group_id=group_id, session_id="s2", title="Trips"))
    service.set_retention(group_id, {"max_age_days": 36_000})


class Writer(threading.Thread):
    """Adds one message at a time to a live session until stopped."""

    def __init__(self, service: Epimem, group_id: str) -> None:
        super().__init__(daemon=True)
        self.service, self.group_id = service, group_id
        self.added = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                message = {"id": f"live-{self.added}", "content": f"Live note {self.added} about the garden."}
                self.service.add_messages(self.group_id, "live", [message])
                self.added += 1
        except BaseException as error:  # reported by the test
            self.error = error

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while self.added < count and self.error is None:
            assert time.monotonic() < deadline, "the writer is stuck"
            time.sleep(0.01)


def test_a_backup_while_writing_restores_every_read_of_its_moment(
    make_service: Callable[..., Epimem], embedder: object, tmp_path: Path, group_id: str
) -> None:
    source = make_service()
    other = f"{group_id}-other"
    _seed(source, group_id)
    two_episode_session(source, other, "o1", day=1)
    source.put_group(GroupConfiguration(group_id=other))  # without one, a group's configuration is made at each read
    writer = Writer(source, group_id)
    writer.start()
    writer.wait_for(3)
    at_moment: dict[str, dict[str, Any]] = {}
    written_at_moment: dict[str, int] = {}

    def capture(group: str) -> None:  # runs while the group is held for the backup
        if group in (group_id, other):
            at_moment[group] = reads(source, group)
            written_at_moment[group] = len(source.history(group_id, "live", limit=1000))

    file = tmp_path / "server.backup.gz"
    with file.open("wb") as out:
        summary = source.memory.backup(out, on_read=capture)
    moment = written_at_moment[group_id]
    writer.wait_for(writer.added + 2)  # it kept writing after the moment
    writer.stop.set()
    writer.join()
    assert writer.error is None
    assert {group_id, other} <= set(summary.groups) and summary.records > 0
    assert 3 <= moment < len(source.history(group_id, "live", limit=1000))

    restored = Epimem.from_settings(data_dir=tmp_path / "restored", background=False, embedder=embedder)
    try:
        receipt = restored.restore(file)
        assert receipt.sha256 == summary.sha256 and set(receipt.groups) == set(summary.groups)
        assert receipt.inexact_vectors == 0
        for group in (group_id, other):
            assert_same_reads(reads(restored, group), at_moment[group])
        live = [m.id for m in restored.history(group_id, "live", limit=1000)]
        assert live == [f"live-{i}" for i in range(moment)]
        # The trail is written after the change it records: the restored one is the source's at most.
        source_trail = {e.id: e for e in source.audit(group_id, limit=500).entries}
        assert all(source_trail.get(e.id) == e for e in restored.audit(group_id, limit=500).entries)
        # The restored store takes writes like any other.
        restored.add_messages(group_id, "live", [{"id": "after", "content": "written after the restore"}])
        assert restored.history(group_id, "live", limit=1000)[-1].id == "after"
    finally:
        restored.close()


def _lines(file: Path) -> list[bytes]:
    with gzip.open(file, "rb") as stream:
        return stream.read().splitlines(keepends=True)


def _rewrite(file: Path, lines: list[bytes]) -> None:
    """The lines as a backup with a correct checksum (a forged but consistent file)."""
    body = b"".join(lines[:-1])
    end = json.loads(lines[-1])
    end["sha256"] = hashlib.sha256(body).hexdigest()
    with gzip.open(file, "wb") as stream:
        stream.write(body + json.dumps(end).encode() + b"\n")


def test_what_was_erased_is_not_in_the_backup_and_restores_are_checked(
    make_service: Callable[..., Epimem], embedder: object, tmp_path: Path, group_id: str
) -> None:
    marker, gone = f"zq{uuid.uuid4().hex[:10]}", f"zq{uuid.uuid4().hex[:10]}"
    source = make_service()
    messages = chat("s1", 3, start=T0, marker=marker)
    messages[1]["content"] += f" {gone}"
    source.add_messages(group_id, "s1", messages)
    source.flush(group_id, "s1")
    source.delete_message(group_id, "s1", "s1-0")
    source.redact_message(group_id, "s1", "s1-1")
    file = tmp_path / "group.backup.gz"
    source.backup(file, group_id=group_id)
    data = b"".join(_lines(file))
    assert marker.encode() not in data and gone.encode() not in data and b'"s1-0"' not in data

    target = Epimem.from_settings(data_dir=tmp_path / "target", background=False, embedder=embedder)
    try:
        target.add_messages("someone-else", "s", chat("x", 1, start=T0))  # another group: a group backup fits
        lines = _lines(file)
        damaged = tmp_path / "damaged.gz"
        _rewrite(damaged, lines)
        raw = bytearray(b"".join(_lines(damaged)))
        raw[len(raw) // 2] ^= 1  # one bit flipped: the checksum no longer matches
        with gzip.open(damaged, "wb") as stream:
            stream.write(bytes(raw))
        header = json.loads(lines[0])
        other_model = tmp_path / "other-model.gz"
        _rewrite(other_model, [json.dumps({**header, "embedding_model": "another:384:x"}).encode() + b"\n", *lines[1:]])
        truncated = tmp_path / "truncated.gz"
        truncated.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
        future = tmp_path / "future.gz"
        _rewrite(future, [json.dumps({**header, "version": 99}).encode() + b"\n", *lines[1:]])
        not_gzip = tmp_path / "plain.json"
        not_gzip.write_text('{"type": "header"}\n')
        for bad in (damaged, other_model, truncated, future, not_gzip):
            with pytest.raises(InvalidInputError):
                target.restore(bad)
            assert target.list_groups() == ["someone-else"], bad.name  # nothing written

        receipt = target.restore(file)
        assert receipt.groups == [group_id]
        assert [m.id for m in target.history(group_id, "s1")] == ["s1-1", "s1-2"]
        assert target.history(group_id, "s1")[0].content == "[redacted]"
        with pytest.raises(ConflictError):  # the group is there now
            target.restore(file)
        server = tmp_path / "server.gz"
        source.backup(server)
        with pytest.raises(ConflictError):  # a server's backup only into an empty store
            target.restore(server)
    finally:
        target.close()
