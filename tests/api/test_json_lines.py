"""Every JSON Lines output is one record per line for any line reader: text with the Unicode line ends that JSON
leaves raw (U+0085, U+2028, U+2029) in ids, content and log messages is written escaped, and reads back the same
(a Hypothesis example with such an id once cut an export line for ``str.splitlines``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.facade import Epimem
from api.logs import JsonFormatter
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

LINE_ENDS = "\x85\u2028\u2029\x0b\x0c\x1c\x1d\x1e\r"  # every character str.splitlines ends a line at, but \n
MESSAGES = [
    {
        "id": "next\x85line",
        "content": "Hiking at dawn\u2028then breakfast\u2029by the lake.",
        "timestamp": "2024-05-01T10:00:00Z",
    },
    {
        "id": "sep\u2028arated",
        "content": f"Every line end: [{LINE_ENDS}] and a normal newline\nin one message.",
        "timestamp": "2024-05-01T10:01:00Z",
    },
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path_factory.mktemp("lines")), background=False, embedder=embedder
    )
    with TestClient(create_app(service)) as test_client:
        assert test_client.post("/v1/groups/lines/sessions/s/messages", json={"messages": MESSAGES}).status_code == 200
        assert test_client.post("/v1/groups/lines/sessions/s/flush").status_code == 200
        yield test_client
    service.close()


def test_an_export_is_one_record_per_line_and_imports_back(client: TestClient) -> None:
    text = client.get("/v1/groups/lines/export").text
    assert text.endswith("\n") and text.splitlines() == text.split("\n")[:-1]
    records = [json.loads(line) for line in text.splitlines()]
    assert records[0]["type"] == "header" and records[-1]["type"] == "end"
    exported = {
        r["record"]["message"]["id"]: r["record"]["message"]["content"] for r in records if r["type"] == "message"
    }
    assert exported == {m["id"]: m["content"] for m in MESSAGES}

    imported = client.post(
        "/v1/groups/lines-copy/import", content=text.encode(), headers={"content-type": "application/x-ndjson"}
    )
    assert imported.status_code == 200, imported.text
    back = client.get("/v1/groups/lines-copy/sessions/s/messages").json()["messages"]
    assert {m["id"]: m["content"] for m in back} == exported


def test_a_log_record_is_one_line() -> None:
    message = f"imported {LINE_ENDS}"
    record = logging.LogRecord("epimem.api", logging.INFO, __file__, 1, message, None, None)
    formatted = JsonFormatter().format(record)
    assert len(formatted.splitlines()) == 1
    assert json.loads(formatted)["message"] == message
