"""Hostile import lines of every kind (Hypothesis): an export taken before a redaction and a delete, one value of one
line replaced (by any JSON value, or by the same field of another line of its kind), imported into the group it came
from with an admin key for every group and with a write key. The property: never a 500, no record the group held
changes, and no erased text comes back (in an export, a search or an episode's history). Against a real uvicorn
server with API keys (embedded Chroma)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0, chat, two_episode_session
from helpers.http_client import HTTP
from helpers.servers import AppServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import GroupConfiguration

# Property tests with many imports: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

ADMIN = "fuzz-admin-all-0123456789ab"
WRITER = "fuzz-writer-0123456789abcd"
GROUP = "fuzzed"
SECRET, GONE = "zqsecretfuzz4821", "zqgonefuzz7713"


class Seeded:
    def __init__(self, service: Epimem, url: str, older: list[dict[str, Any]], before: set[str]) -> None:
        self.service, self.url, self.older, self.before = service, url, older, before


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def held(url: str) -> set[str]:
    """Every record the group holds, as an export writes it (but its own time)."""
    response = HTTP.get(f"{url}/v1/groups/{GROUP}/export", headers=auth(ADMIN), timeout=120)
    assert response.status_code == 200, response.text
    return {json.dumps(r, sort_keys=True) for r in map(json.loads, response.text.splitlines()) if r["type"] != "header"}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[Seeded]:
    folder: Path = tmp_path_factory.mktemp("import-fuzz")
    entries = [{"key": ADMIN, "groups": ["*"], "role": "admin"}, {"key": WRITER, "groups": ["*"], "role": "write"}]
    (folder / "keys.json").write_text(json.dumps({"keys": entries}))
    settings = Settings(data_dir=folder / "data", api_keys_file=folder / "keys.json")
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    service.put_group(GroupConfiguration(group_id=GROUP, description="a group to fuzz", metadata={"team": "a"}))
    two_episode_session(service, GROUP, "keep", day=0)
    service.add_messages(GROUP, "red", chat("r", 3, start=T0 + timedelta(days=3), marker=SECRET))
    (episode,) = service.flush(GROUP, "red")
    service.correct_episode(GROUP, "red", episode.uuid, content=f"They said {SECRET} there.", reason="quote")
    service.add_messages(GROUP, "del", chat("d", 3, start=T0 + timedelta(days=5), marker=GONE))
    service.flush(GROUP, "del")
    service.generate_summaries(GROUP, days_back=60, max_memories_per_summary=10, reference_time=T0 + timedelta(days=30))
    with AppServer(service) as server:
        response = HTTP.get(
            f"{server.url}/v1/groups/{GROUP}/export", params={"include_embeddings": True}, headers=auth(ADMIN)
        )
        older = [json.loads(line) for line in response.text.splitlines()]
        assert {r["type"] for r in older} >= {"header", "group", "session", "message", "episode", "summary"}
        assert {"message_vector", "revision", "end"} <= {r["type"] for r in older}
        service.redact_message(GROUP, "red", "r-0")
        service.delete_message(GROUP, "del", "d-0")
        yield Seeded(service, server.url, older, held(server.url))
    service.close()


_TEXT = st.text(max_size=30)
_ANY = st.one_of(
    _TEXT,
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(_TEXT, max_size=2),
    st.dictionaries(_TEXT, _TEXT, max_size=2),
    st.sampled_from(["2023-05-08T13:00:00Z", "pending", "done", "forming", "generated", "correction", "r-1", "d-1"]),
)
INNER = ("record", "episode", "session", "config", "revision", "counts")
SWAP = "(the same field of another line of its kind)"
RENAME = "(its value with a suffix: another id)"


def target_of(line: dict[str, Any], inner_message: bool) -> dict[str, Any]:
    inner = next((k for k in INNER if isinstance(line.get(k), dict)), None)
    target = line[inner] if inner else line
    return target["message"] if inner_message and isinstance(target.get("message"), dict) else target


def mutated(records: list[dict[str, Any]], data: st.DataObject, kinds: list[str]) -> list[dict[str, Any]]:
    """``records`` with one value of one line replaced: a line of any kind (half the time one that holds the text
    a delete or a redaction erased), any of its fields or its message's, by any JSON value, the same field of
    another line of its kind, or its own value with a suffix (an id no line had)."""
    records = json.loads(json.dumps(records))
    kind = data.draw(st.sampled_from(kinds), label="kind")
    lines = [r for r in records if r["type"] == kind]
    erased = [r for r in lines if SECRET in json.dumps(r) or GONE in json.dumps(r)]
    pool = erased if erased and data.draw(st.booleans(), label="a line with erased text") else lines
    line = data.draw(st.sampled_from(pool), label="line")
    inner_message = data.draw(st.booleans(), label="its message")
    target = target_of(line, inner_message)
    key = data.draw(st.sampled_from(sorted(target)), label="field")
    value = data.draw(st.one_of(_ANY, st.just(SWAP), st.just(RENAME)), label="value")
    if value == SWAP:
        others = [target_of(r, inner_message) for r in lines if r is not line]
        value = json.loads(json.dumps(others[0].get(key))) if others else None
    elif value == RENAME:
        value = f"{target[key]}-x" if isinstance(target[key], str) else value
    target[key] = value
    return records


def imported(url: str, records: list[dict[str, Any]], key: str) -> httpx.Response:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    headers = {**auth(key), "content-type": "application/x-ndjson"}
    return HTTP.post(f"{url}/v1/groups/{GROUP}/import", content=body, headers=headers, timeout=300)


def check(seeded: Seeded, response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:500]
    after = held(seeded.url)
    assert seeded.before <= after, sorted(seeded.before - after)[:2]  # nothing the group held changed
    texts = "\n".join(after)
    texts += json.dumps([h.episode.model_dump(mode="json") for h in seeded.service.search(GROUP, SECRET, k=20)])
    texts += json.dumps([h.episode.model_dump(mode="json") for h in seeded.service.search(GROUP, GONE, k=20)])
    assert SECRET not in texts and GONE not in texts


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_restore_of_any_hostile_line_changes_nothing_stored_and_erases_nothing_back(
    seeded: Seeded, data: st.DataObject
) -> None:
    kinds = ["header", "group", "session", "message", "message_vector", "episode", "summary", "revision", "end"]
    check(seeded, imported(seeded.url, mutated(seeded.older, data, kinds), ADMIN))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_conversation_of_any_hostile_line_changes_nothing_stored_and_erases_nothing_back(
    seeded: Seeded, data: st.DataObject
) -> None:
    check(
        seeded,
        imported(
            seeded.url,
            mutated(conversation(seeded.older), data, ["header", "group", "session", "message", "end"]),
            WRITER,
        ),
    )


@pytest.mark.parametrize("key", [ADMIN, WRITER])
@pytest.mark.parametrize("message_id", ["r-0", "d-0"])
def test_an_erased_message_under_another_id_does_not_come_back(seeded: Seeded, key: str, message_id: str) -> None:
    """The attack the properties look for, every time: the line of a redacted or deleted message renamed."""
    records = conversation(seeded.older) if key == WRITER else json.loads(json.dumps(seeded.older))
    for record in records:
        if record["type"] == "message" and record["record"]["message"]["id"] == message_id:
            record["record"]["message"]["id"] = f"{message_id}-renamed"
    check(seeded, imported(seeded.url, records, key))


def conversation(older: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines a write key may import: the header, the group, the sessions and the messages, and an end."""
    records = [r for r in older if r["type"] in ("header", "group", "session", "message")]
    kinds = [r["type"] for r in records]
    counts = {"sessions": kinds.count("session"), "messages": kinds.count("message"), "episodes": 0, "summaries": 0}
    return [*records, {"type": "end", "counts": counts | {"message_vectors": 0}}]
