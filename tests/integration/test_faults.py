"""Faults: the Chroma server going away under HTTP traffic, and the LLM down or slow."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from helpers.builders import message
from helpers.checks import assert_consistent
from helpers.fake_openai import FakeOpenAI, Reply
from helpers.processes import child_env
from helpers.servers import ChromaServer, ServerProcess, free_port

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.errors import StoreUnavailableError
from memory.models import GenerationMethod

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

# -- store outage --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_chroma_server_outage_gives_fast_503_and_recovers_by_itself(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    chroma = ChromaServer(tmp_path / "chroma")
    chroma.start()
    env = child_env(
        tmp_path / "data",
        EPIMEM_CHROMA_HOST="127.0.0.1",
        EPIMEM_CHROMA_PORT=str(chroma.port),
        EPIMEM_CHROMA_TIMEOUT_S="3",
    )
    server = ServerProcess.uvicorn(env, log=tmp_path / "server.log")
    acked: set[str] = set()
    base = f"{server.url}/v1/groups/g/sessions/s"
    try:
        server.start()
        with httpx.Client(timeout=30) as http:

            def send(start: int) -> httpx.Response:
                batch = [message(i, session="s") for i in range(start, start + 3)]
                response = http.post(base + "/messages", json={"messages": batch})
                if response.is_success:
                    acked.update(m["id"] for m in batch)
                return response

            assert send(0).status_code == 200
            assert chroma.process is not None
            chroma.process.kill()  # SIGKILL: no goodbye
            chroma.process.wait()
            for number, call in enumerate(
                [
                    lambda: send(10),
                    lambda: http.post(f"{server.url}/v1/groups/g/search", json={"query": "hiking"}),
                    lambda: http.get(f"{server.url}/v1/groups/g/timeline"),
                    lambda: http.get(f"{server.url}/readyz"),
                ]
            ):
                response = call()  # an answer, not a hang: the client gives up after 30 s
                assert response.status_code == 503, (number, response.text)
                assert int(response.headers["Retry-After"]) >= 1
                assert response.json()["error"]["code"] == "store_unavailable"
            chroma.start()  # same path, same port
            deadline = time.monotonic() + 30
            while send(20).status_code != 200:  # no restart of epimem needed
                assert time.monotonic() < deadline, "epimem did not recover when Chroma came back"
                time.sleep(0.5)
            assert http.post(base + "/flush").status_code == 200
            assert http.post(f"{server.url}/v1/groups/g/search", json={"query": "hiking"}).status_code == 200
    finally:
        server.stop()
    service = Epimem.from_settings(
        background=False,
        embedder=embedder,
        data_dir=tmp_path / "check",
        chroma_host="127.0.0.1",
        chroma_port=chroma.port,
    )
    try:
        assert acked == {message(i, session="s")["id"] for i in (0, 1, 2, 20, 21, 22)}
        expected = {"s": {mid: str(message(int(mid.rsplit("-m", 1)[1]), session="s")["content"]) for mid in acked}}
        assert_consistent(service, "g", expected, flushed=True)
    finally:
        service.close()
        chroma.stop()


def test_a_hung_chroma_server_times_out(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    """A server that accepts connections and never answers: requests end after chroma_timeout_s."""
    chroma = ChromaServer(tmp_path / "chroma")
    chroma.start()
    service = Epimem.from_settings(
        background=False,
        embedder=embedder,
        data_dir=tmp_path / "data",
        chroma_host="127.0.0.1",
        chroma_port=chroma.port,
        chroma_timeout_s=1.5,
    )
    assert chroma.process is not None
    try:
        service.add_messages("g", "s", [message(0)])
        chroma.process.send_signal(signal.SIGSTOP)
        failures: list[BaseException] = []

        def add() -> None:
            try:
                service.add_messages("g", "s", [message(1)])
            except StoreUnavailableError as error:
                failures.append(error)

        adding = threading.Thread(target=add)
        adding.start()
        adding.join(120)  # without its timeout the add would wait for the stopped server for ever
        assert not adding.is_alive() and len(failures) == 1
    finally:
        chroma.process.send_signal(signal.SIGCONT)
        service.close()
        chroma.stop()


# -- LLM outage -------------------------------------------------------------------------------------------------


def test_llm_down_ingest_acknowledges_and_episodes_fall_back(
    make_service: Callable[..., Epimem], group_id: str
) -> None:
    """Connection refused: adds are acknowledged, flush makes complete fallback episodes at once."""
    service = make_service(
        llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_api_key="test", llm_max_retries=1, llm_timeout_s=2
    )
    messages = [message(i) for i in range(10)]
    assert service.add_messages(group_id, "s", messages).accepted == [m["id"] for m in messages]
    episodes = service.flush(group_id, "s")
    assert episodes and all(e.generation is GenerationMethod.FALLBACK for e in episodes)
    assert_consistent(service, group_id, {"s": {m["id"]: m["content"] for m in messages}}, flushed=True)
    assert service.search(group_id, "hiking at Lake Tahoe", k=3)


def test_a_slow_llm_blocks_neither_adds_nor_search(make_service: Callable[..., Epimem], group_id: str) -> None:
    """The background formation waits on an LLM that does not answer until the test lets it; meanwhile adds and
    searches of the same session and group finish (no lock they need is held by the formation)."""
    arrived, release = threading.Event(), threading.Event()
    with FakeOpenAI() as llm:
        service = make_service(
            background=True,
            llm_base_url=llm.url,
            llm_api_key="test",
            llm_timeout_s=600,
            llm_max_retries=0,
            auto_flush_pending=6,
            episode_max_messages=3,
        )
        service.add_messages(group_id, "s", [message(i) for i in range(3)])
        llm.script(*[Reply(content={"title": "Hiking", "content": "They talked about hiking."}) for _ in range(2)])
        service.flush(group_id, "s")  # something to find
        held = Reply(content={"title": "Slow", "content": "A slow answer."}, arrived=arrived, hold=release)
        llm.script(*[held] * 20)
        service.add_messages(group_id, "s", [message(i) for i in range(3, 12)])  # triggers a formation
        try:
            assert arrived.wait(120), "the formation sent no LLM request"

            found: list[int] = []

            def search_and_add() -> None:
                for i in range(5):
                    found.append(len(service.search(group_id, f"hiking {i}", k=3)))
                    service.add_messages(group_id, "s", [message(20 + i)])

            meanwhile = threading.Thread(target=search_and_add)
            meanwhile.start()
            meanwhile.join(timeout=300)  # bounded by the work itself: the LLM answers only after this
            assert not meanwhile.is_alive(), "a search or an add waited for the formation"
            assert len(found) == 5 and all(found), found
            assert not service.wait_idle(0), "the formation should still be waiting on the LLM"
        finally:
            release.set()
        assert service.wait_idle(120)
