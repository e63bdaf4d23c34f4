"""Messages of any realistic length over HTTP: the default caps take a message of 500,000 characters however a
client escapes it (an astral character as a JSON surrogate-pair escape: 12 bytes), stored whole and read back
verbatim; one character more is a 422 that names the message and stores nothing of the batch."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from helpers.builders import T0

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

CAP = Settings().max_message_chars


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("long-messages"))
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    with TestClient(create_app(service, settings)) as test_client:
        yield test_client
    service.close()


@pytest.mark.slow
def test_the_default_caps_take_the_longest_message_escaped_as_it_may_be(client: TestClient) -> None:
    assert CAP >= 400_000  # the longest BEAM message is 348,853 characters
    content = 'a "quoted" é\n' + "🦊🚀" * ((CAP - 16) // 2) + "end"
    assert len(content) == CAP
    body = json.dumps({"messages": [{"id": "long", "content": content, "timestamp": T0.isoformat()}]})
    assert len(body.encode()) > 5 * 1024 * 1024  # escaped, it is more than the body cap used to allow
    answer = client.post(
        "/v1/groups/g/sessions/s/messages", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200, answer.text[:500]
    assert answer.json()["accepted"] == ["long"]
    (stored,) = client.get("/v1/groups/g/sessions/s/messages").json()["messages"]
    assert stored["content"] == content


def test_a_message_over_the_cap_is_refused_and_nothing_is_stored(client: TestClient) -> None:
    batch = [
        {"id": "fine", "content": "a short one", "timestamp": T0.isoformat()},
        {"id": "over", "content": "x" * (CAP + 1), "timestamp": T0.isoformat()},
    ]
    answer = client.post("/v1/groups/g/sessions/over/messages", json={"messages": batch})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["details"] == {"max_message_chars": CAP, "ids": ["over"]}
    assert client.get("/v1/groups/g/sessions/over/messages").json()["messages"] == []
