"""SIGTERM while the startup recovery forms episodes stops a real ``epimem serve`` without waiting for the
recovery, and nothing is lost: the next start forms every pending message into an episode. The LLM is the one
stand-in (tests/helpers/fake_openai.py); it answers no request of the first server, so that server can stop only by
not waiting for its recovery."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.builders import T0, chat
from helpers.fake_openai import FakeOpenAI, Reply, episode_from_prompt
from helpers.http_client import HTTP
from helpers.processes import clean_env
from helpers.servers import ServerProcess

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

GROUP = "recovering"
SESSIONS = 4  # the recovery waits on its first LLM call whatever their number: a few prove the same


UNANSWERED = threading.Event()  # never set while the first server runs


def unanswered(request: dict[str, Any]) -> Reply:
    return replace(episode_from_prompt(request), hold=UNANSWERED)


def test_sigterm_during_the_startup_recovery_stops_fast_and_loses_nothing(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    data = tmp_path / "data"
    seeding = Epimem.from_settings(Settings(data_dir=data), background=False, embedder=embedder)
    for i in range(SESSIONS):  # pending messages, as a crash before their formation leaves them
        seeding.add_messages(GROUP, f"s{i}", chat(f"s{i}", 3, start=T0, topic=i))
    seeding.close()
    time.sleep(1.1)  # the sessions are quiet (EPIMEM_EPISODE_IDLE_SECONDS=1 below): the recovery forms them whole

    with FakeOpenAI(unanswered) as llm:
        env = clean_env(
            EPIMEM_DATA_DIR=str(data),
            EPIMEM_LLM_BASE_URL=llm.url,
            EPIMEM_LLM_API_KEY="test-key",
            EPIMEM_LLM_TIMEOUT_S="600",
            EPIMEM_EPISODE_IDLE_SECONDS="1",
        )
        server = ServerProcess.serve(env=env, log=tmp_path / "first.log")
        try:
            with server:
                deadline = time.monotonic() + 120
                while not (llm.requests_of("episode") or llm.requests_of("segment")):
                    assert time.monotonic() < deadline, "the recovery sent no LLM request"
                    time.sleep(0.1)
                assert HTTP.get(f"{server.url}/readyz", timeout=10).json()["recovering"] is True
                assert server.process is not None
                server.process.terminate()
                server.process.wait(timeout=120)  # the recovery cannot end before: its LLM call is unanswered
            assert not UNANSWERED.is_set()
            assert "stopping during the startup recovery" in server.output(), server.output()[-2000:]
        finally:
            UNANSWERED.set()

    with FakeOpenAI() as llm:
        env = clean_env(
            EPIMEM_DATA_DIR=str(data),
            EPIMEM_LLM_BASE_URL=llm.url,
            EPIMEM_LLM_API_KEY="test-key",
            EPIMEM_EPISODE_IDLE_SECONDS="1",
        )
        with ServerProcess.serve(env=env, log=tmp_path / "second.log") as again:
            again.wait_recovered(timeout=300)
            for i in range(SESSIONS):
                page = HTTP.get(f"{again.url}/v1/groups/{GROUP}/timeline", params={"session_id": f"s{i}"}).json()
                cited = {m for e in page["episodes"] for m in e["source_message_ids"]}
                assert cited == {f"s{i}-{n}" for n in range(3)}, (i, page)
