"""Stateless servers: three epimem processes on one Chroma server behind one round-robin address.

Whatever server a request lands on, it answers as if there were one: a write on one is read on the next, a session
forms once however many servers flush it at the same moment, deletions and redactions hold on every server, and a
server killed in the middle of requests loses nothing it acknowledged.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from helpers.builders import T0
from helpers.http_client import HTTP
from helpers.processes import clean_env
from helpers.round_robin import RoundRobin
from helpers.servers import ChromaServer, ServerProcess

pytestmark = pytest.mark.slow
SERVERS = 3


@dataclass
class Cluster:
    chroma: ChromaServer
    servers: list[ServerProcess]
    balancer: RoundRobin

    @property
    def url(self) -> str:
        return self.balancer.url

    def direct(self) -> list[str]:
        return [server.url for server in self.servers if server.process and server.process.poll() is None]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("stateless")
    chroma = ChromaServer(root / "chroma")
    chroma.start()
    servers: list[ServerProcess] = []
    balancer: RoundRobin | None = None
    try:
        for index in range(SERVERS):
            env = clean_env(
                EPIMEM_DATA_DIR=str(root / f"data-{index}"),
                EPIMEM_CHROMA_HOST="127.0.0.1",
                EPIMEM_CHROMA_PORT=str(chroma.port),
                EPIMEM_NODE_ID=f"node-{index}",
                TOKENIZERS_PARALLELISM="false",
            )
            servers.append(ServerProcess.uvicorn(env, log=root / f"epimem-{index}.log"))
        with ThreadPoolExecutor(SERVERS) as pool:  # the three load their model at the same time
            list(pool.map(lambda server: server.start().wait_recovered(), servers))
        balancer = RoundRobin([server.url for server in servers]).start()
        yield Cluster(chroma, servers, balancer)
    finally:
        if balancer is not None:
            balancer.stop()
        for server in servers:
            server.stop()
        chroma.stop()


def _messages(prefix: str, texts: list[str], *, start: int = 0) -> list[dict[str, object]]:
    return [
        {
            "id": f"{prefix}-{start + i}",
            "content": text,
            "producer_id": "ana" if (start + i) % 2 == 0 else "ben",
            "timestamp": T0.replace(minute=(start + i) % 60, hour=10 + (start + i) // 60).isoformat(),
        }
        for i, text in enumerate(texts)
    ]


def _ok(response: httpx.Response) -> dict[str, object]:
    assert response.status_code == 200, response.text
    return dict(response.json())


def _cited_ids(context: dict[str, object]) -> set[str]:
    return {str(i) for citation in context["citations"] for i in citation["message_ids"]}  # type: ignore[attr-defined]


def test_a_write_on_one_server_is_read_on_the_next(cluster: Cluster) -> None:
    group = f"rr-{uuid.uuid4().hex[:8]}"
    words = ["harbour", "lantern", "orchard", "glacier", "meadow", "canyon", "violin", "compass", "saffron"]
    with httpx.Client(base_url=cluster.url, timeout=120) as client:
        for i, word in enumerate(words):
            said = f"My favourite word this week is {word}, I keep thinking about the {word}."
            _ok(
                client.post(
                    f"/v1/groups/{group}/sessions/s{i % 2}/messages", json={"messages": _messages(word, [said])}
                )
            )
            # The next request lands on the next server: every read sees the write just acknowledged.
            hits = _ok(client.post(f"/v1/groups/{group}/search", json={"query": f"the {word}", "k": 3}))["hits"]
            assert any(word in hit["episode"]["content"] for hit in hits), (word, hits)  # type: ignore[attr-defined,index]
            context = _ok(
                client.post(f"/v1/groups/{group}/context", json={"query": f"the {word}", "token_budget": 300})
            )
            assert f"{word}-0" in _cited_ids(context)
            history = _ok(client.get(f"/v1/groups/{group}/sessions/s{i % 2}/messages", params={"limit": 100}))
            assert f"{word}-0" in {m["id"] for m in history["messages"]}  # type: ignore[attr-defined]
    assert len(set(cluster.balancer.served)) == SERVERS


def test_a_session_forms_once_when_every_server_flushes_it(cluster: Cluster) -> None:
    group = f"rr-{uuid.uuid4().hex[:8]}"
    texts = [f"Step {i} of the plan: we paint room {i} and then we order new tiles for it." for i in range(20)]
    with httpx.Client(base_url=cluster.url, timeout=300) as client:
        for start in range(0, len(texts), 2):  # as a chat app sends them: two per call, spread over the servers
            chunk = texts[start : start + 2]
            _ok(
                client.post(
                    f"/v1/groups/{group}/sessions/plan/messages", json={"messages": _messages("p", chunk, start=start)}
                )
            )
    barrier = threading.Barrier(len(cluster.servers))
    answers: list[httpx.Response] = []

    def flush(url: str) -> None:
        barrier.wait()
        answers.append(HTTP.post(f"{url}/v1/groups/{group}/sessions/plan/flush", timeout=300))

    threads = [threading.Thread(target=flush, args=(url,)) for url in cluster.direct()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answer.status_code for answer in answers] == [200] * len(threads), [a.text for a in answers]
    for url in cluster.direct():
        episodes = _ok(HTTP.get(f"{url}/v1/groups/{group}/timeline", params={"limit": 100}, timeout=60))["episodes"]
        formed = [e for e in episodes if not e.get("pending")]  # type: ignore[attr-defined,union-attr]
        cited = [m for e in formed for m in e["source_message_ids"]]  # type: ignore[index]
        assert sorted(cited) == sorted(f"p-{i}" for i in range(len(texts))), (url, cited)  # each message once


def test_deletes_and_redactions_hold_on_every_server(cluster: Cluster) -> None:
    group = f"rr-{uuid.uuid4().hex[:8]}"
    secret, gone = f"tulip{uuid.uuid4().hex[:6]}", f"cobalt{uuid.uuid4().hex[:6]}"
    texts = [
        f"The gate code for the storage unit is {secret}, keep it safe.",
        f"The old project name was {gone}, we dropped it in March.",
        "We meet every Tuesday at the library to plan the garden.",
        "The garden needs tomatoes, basil and a new fence this spring.",
    ]
    with httpx.Client(base_url=cluster.url, timeout=300) as client:
        _ok(client.post(f"/v1/groups/{group}/sessions/a/messages", json={"messages": _messages("a", texts[:2])}))
        _ok(client.post(f"/v1/groups/{group}/sessions/b/messages", json={"messages": _messages("b", texts[2:])}))
        _ok(client.post(f"/v1/groups/{group}/sessions/a/flush"))
        _ok(client.post(f"/v1/groups/{group}/sessions/b/flush"))
    for url in cluster.direct():  # every server reads the group once: each holds it in its read cache
        context = _ok(
            HTTP.post(f"{url}/v1/groups/{group}/context", json={"query": "gate code project name"}, timeout=60)
        )
        assert secret in str(context["text"]) and gone in str(context["text"])
    first, second = cluster.direct()[:2]
    redacted = HTTP.post(f"{first}/v1/groups/{group}/sessions/a/messages/a-0/redact", json={}, timeout=300)
    assert redacted.status_code == 200 and redacted.json()["redacted"] is True, redacted.text
    deleted = HTTP.delete(f"{second}/v1/groups/{group}/sessions/a/messages/a-1", timeout=300)
    assert deleted.status_code == 200, deleted.text
    for url in cluster.direct():
        reads = [
            HTTP.post(f"{url}/v1/groups/{group}/search", json={"query": "gate code project name", "k": 10}, timeout=60),
            HTTP.post(f"{url}/v1/groups/{group}/context", json={"query": "gate code project name"}, timeout=60),
            HTTP.get(f"{url}/v1/groups/{group}/timeline", params={"limit": 100}, timeout=60),
            HTTP.get(f"{url}/v1/groups/{group}/sessions/a/messages", params={"limit": 100}, timeout=60),
            HTTP.get(f"{url}/v1/groups/{group}/export", timeout=60),
        ]
        for read in reads:
            assert read.status_code == 200, read.text
            assert secret not in read.text and gone not in read.text, (url, read.request.url)
        assert "garden" in reads[2].text  # what was not erased is still there


def test_a_server_killed_mid_request_loses_nothing_acknowledged(cluster: Cluster, tmp_path: Path) -> None:
    group = f"rr-{uuid.uuid4().hex[:8]}"
    acknowledged: set[str] = set()
    sent = threading.Event()
    stop = threading.Event()

    def writer() -> None:
        counter = 0
        with httpx.Client(base_url=cluster.url, timeout=120) as client:
            while not stop.is_set():
                batch = _messages(f"k{counter}", [f"Note {counter}: the shipment of crate {counter} left today."] * 3)
                for i, message in enumerate(batch):
                    message["id"] = f"k{counter}-{i}"
                for _ in range(50):  # a client retries the same batch until one server acknowledges it
                    try:
                        answer = client.post(f"/v1/groups/{group}/sessions/ship/messages", json={"messages": batch})
                    except httpx.TransportError:
                        continue
                    if answer.status_code == 200:
                        acknowledged.update(str(m["id"]) for m in batch)
                        break
                    assert answer.status_code in (502, 503), answer.text
                counter += 1
                if counter == 4:
                    sent.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert sent.wait(timeout=300)
    victim = cluster.servers[-1]
    victim.kill()  # SIGKILL while the writer keeps sending through the balancer
    before = len(acknowledged)
    while len(acknowledged) < before + 12 and thread.is_alive():  # the writer goes on past the kill
        stop.wait(0.05)
    stop.set()
    thread.join(timeout=600)
    assert acknowledged
    for url in cluster.direct():
        stored: set[str] = set()
        cursor: str | None = None
        while True:
            params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            page = _ok(HTTP.get(f"{url}/v1/groups/{group}/sessions/ship/messages", params=params, timeout=60))
            stored |= {str(m["id"]) for m in page["messages"]}  # type: ignore[attr-defined]
            if (cursor := page.get("next_cursor")) is None:  # type: ignore[assignment]
                break
        assert acknowledged <= stored, sorted(acknowledged - stored)[:10]
