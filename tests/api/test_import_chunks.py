"""Import cannot stall a group: a file holds at most a documented number of lines of each kind (413 past it), and an
import writes in chunks, releasing the group's locks between them, so that an add to the same group completes while
a large import is still under way. The import is held at a known point by an embedder that waits on a marker (events,
not time); against a real uvicorn server with API keys, on both Chroma backends."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.builders import T0
from helpers.embedders import GatedEmbedder
from helpers.http_client import HTTP
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.lifecycle.export_format import MAX_LINES
from memory.lifecycle.importing import CHUNK

ADMIN = "chunks-admin-all-0123456789"
WRITER = "chunks-writer-0123456789ab"
MARKER = "zqmarkerline"
COUNT = 2 * CHUNK + CHUNK // 4  # three chunks of messages; the marker in the second


def keys_file(folder: Path) -> Path:
    entries = [
        {"key": ADMIN, "groups": ["*"], "role": "admin", "name": "ops"},
        {"key": WRITER, "groups": ["*"], "role": "write", "name": "writer"},
    ]
    path = folder / "keys.json"
    path.write_text(json.dumps({"keys": entries}))
    return path


def header(group_id: str, model_id: str) -> dict[str, Any]:
    model = {"id": model_id, "name": model_id, "dimension": 0, "fingerprint": ""}
    return {
        "type": "header",
        "format": "epimem-export",
        "version": 1,
        "group_id": group_id,
        "exported_at": T0.isoformat(),
        "embedding_model": model,
        "embeddings": False,
    }


def large_file(group: str, model_id: str) -> list[dict[str, Any]]:
    """A session of ``COUNT`` pending messages and their vector lines (no embeddings: epimem embeds them)."""
    records = [header(group, model_id), {"type": "session", "session": {"group_id": group, "session_id": "big"}}]
    for i in range(COUNT):
        text = f"Line {i} of the long import about the harbour." + (f" {MARKER}" if i == CHUNK + CHUNK // 2 else "")
        message = {"id": f"b{i}", "content": text, "timestamp": (T0.replace(microsecond=i)).isoformat()}
        records.append({"type": "message", "record": {"group_id": group, "session_id": "big", "message": message}})
    records += [{"type": "message_vector", "session_id": "big", "message_id": f"b{i}"} for i in range(COUNT)]
    counts = {"sessions": 1, "messages": COUNT, "episodes": 0, "summaries": 0, "message_vectors": COUNT}
    return [*records, {"type": "end", "counts": counts}]


def send(url: str, records: list[dict[str, Any]], key: str, group_id: str) -> httpx.Response:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    headers = {"authorization": f"Bearer {key}", "content-type": "application/x-ndjson"}
    return HTTP.post(f"{url}/v1/groups/{group_id}/import", content=body, headers=headers, timeout=900)


@pytest.mark.slow  # imports hundreds of messages twice per backend
@pytest.mark.parametrize("key", [WRITER, ADMIN], ids=["conversation", "restore"])
def test_an_add_to_the_group_completes_while_a_large_import_runs(
    settings_for: Callable[..., Settings],
    embedder: SentenceTransformerEmbedder,
    tmp_path: Path,
    key: str,
    group_id: str,
) -> None:
    group = group_id
    gated = GatedEmbedder(embedder, MARKER)
    service = Epimem.from_settings(settings_for(api_keys_file=keys_file(tmp_path)), background=False, embedder=gated)
    answers: dict[str, httpx.Response] = {}
    try:
        with AppServer(service) as server:
            records = large_file(group, service.memory.store.model_id)

            def run_import() -> None:
                answers["import"] = send(server.url, records, key, group)

            def run_add() -> None:
                url = f"{server.url}/v1/groups/{group}/sessions/live/messages"
                body = {"messages": [{"id": "live-1", "content": "Said while the import ran.", "producer_id": "ana"}]}
                answers["add"] = HTTP.post(url, json=body, headers={"authorization": f"Bearer {WRITER}"}, timeout=600)

            importing = threading.Thread(target=run_import)
            importing.start()
            try:
                assert gated.reached.wait(600), "the import never reached its second chunk"
                assert service.memory.vector_count(group) >= CHUNK, "the first chunk is written before the second"
                adding = threading.Thread(target=run_add)
                adding.start()
                adding.join(timeout=240)  # bounds a failure only: the add waits on nothing the import holds
                add_finished_first = not adding.is_alive() and importing.is_alive()
            finally:
                gated.release.set()
                importing.join(timeout=900)
            adding.join(timeout=600)
            assert add_finished_first, "the add waited for the import"
            assert answers["add"].status_code == 200, answers["add"].text
            assert answers["import"].status_code == 200, answers["import"].text
            assert len(service.memory.messages(group, "big")) == COUNT
            assert [m.id for m in service.memory.messages(group, "live")] == ["live-1"]
            hits = service.search(group, MARKER, k=3)
            assert any(f"b{CHUNK + CHUNK // 2}" in h.episode.source_message_ids for h in hits)
    finally:
        gated.release.set()
        service.close()


def test_every_line_kind_has_a_bound_and_past_it_the_import_is_a_413(
    make_service: Callable[..., Epimem], serve: Callable[..., AppServer], tmp_path: Path, group_id: str
) -> None:
    assert set(MAX_LINES) == {"session", "message", "message_vector", "episode", "summary", "revision"}
    service = make_service(api_keys_file=keys_file(tmp_path))
    url = serve(service).url
    revision = {"revision": 0, "kind": "generated", "title": "t", "content": "c", "changed_at": T0.isoformat()}
    revision |= {"changed_by": "epimem"}
    line = {"type": "revision", "session_id": "s", "episode_id": "e", "revision": revision}
    records = [header(group_id, service.memory.store.model_id)] + [line] * (MAX_LINES["revision"] + 1)
    response = send(url, records, ADMIN, group_id)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["details"] == {"line": MAX_LINES["revision"] + 2, "kind": "revision", "max_lines": 10_000}
    assert f"at most {MAX_LINES['revision']} revision lines" in error["message"]
    assert not service.group_exists(group_id)
