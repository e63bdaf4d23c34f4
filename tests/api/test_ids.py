"""One id rule (``memory.ids``) on every surface: the facade (its reads, writes, corrections and operations), HTTP
paths, queries and bodies, and imports refuse the same ids with the same words; the OpenAPI pattern that
documents the rule for clients admits every id the rule admits (bar '/', which a URL path cannot hold)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from api.facade import Epimem
from api.server import create_app
from memory.errors import InvalidInputError
from memory.ids import MAX_ID_LENGTH, PATH_ID_PATTERN, id_problem
from memory.lifecycle.export_format import read_export
from memory.models import Message

BAD = {
    "blank": "  ",
    "zero-width": "\u200b\u2060",
    "control": "a\x01b",
    "long": "g" * (MAX_ID_LENGTH + 1),
}
GOOD = ["team-a", "ünïcode ✓", "a b", "~x", "😀", "g" * MAX_ID_LENGTH, "a.b_c-d:e@f"]


@pytest.fixture(scope="module")
def service(embedded_service: Epimem) -> Epimem:
    return embedded_service


@pytest.fixture(scope="module")
def client(service: Epimem) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as test_client:
        yield test_client


def problem(name: str) -> str:
    found = id_problem(BAD[name])
    assert found is not None
    return found


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_facade_refuses_a_bad_id_the_same_way_in_every_operation(service: Epimem, name: str) -> None:
    bad = BAD[name]
    calls = [
        lambda: service.search(bad, "x"),
        lambda: service.add_messages("g", bad, [{"id": "m", "content": "x"}]),
        lambda: service.timeline("g", session_id=bad),
        lambda: service.correct_episode(bad, "s", "e", title="t"),
        lambda: service.retention(bad),
        lambda: service.clear_retention("g", session_id=bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError) as refused:
            call()
        assert str(refused.value.message) == f"invalid group or session id: {problem(name)}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_http_refuses_a_bad_id_in_paths_queries_and_bodies_with_the_rules_words(client: TestClient, name: str) -> None:
    bad = quote(BAD[name])
    answers = [
        client.get(f"/v1/groups/{bad}"),
        client.get(f"/v1/groups/g/sessions/{bad}/messages"),
        client.get(f"/v1/groups/g/sessions/s/episodes/{bad}"),
        client.get(f"/v1/groups/g/timeline?session_id={bad}"),
        client.post("/v1/groups/g/search", json={"query": "x", "session_ids": [BAD[name]]}),
    ]
    for answer in answers:
        assert answer.status_code == 422, answer.text
        assert problem(name) in answer.json()["error"]["message"], answer.text


def test_a_message_id_has_the_same_rule_with_its_own_length(client: TestClient) -> None:
    long = "m" * 257
    with pytest.raises(ValueError, match="longer than 256 characters"):
        Message(id=long, content="x")
    answer = client.delete(f"/v1/groups/g/sessions/s/messages/{long}")
    assert answer.status_code == 422 and "longer than 256 characters" in answer.json()["error"]["message"]


def test_an_import_refuses_a_bad_group_id_in_its_header() -> None:
    header = {"type": "header", "format": "epimem-export", "version": 1, "group_id": BAD["control"]}
    with pytest.raises(ValueError, match="control characters"):
        read_export([json.dumps(header) + "\n"])


def test_the_documented_pattern_admits_every_id_the_rule_admits() -> None:
    for good in GOOD:
        assert id_problem(good) is None
        assert re.fullmatch(PATH_ID_PATTERN, good), good
    for name in ("blank", "control"):
        assert not re.fullmatch(PATH_ID_PATTERN, BAD[name])
