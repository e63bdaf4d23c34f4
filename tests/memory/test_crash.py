"""kill -9 in the middle of ingesting, then restart: nothing acknowledged is lost, pending messages
become episodes, no episode twice, every collection still opens and answers.

Once through the facade in a child process, once through the real HTTP server (uvicorn).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from helpers.builders import message
from helpers.checks import assert_consistent
from helpers.processes import child_env
from helpers.servers import ServerProcess

from api.facade import Epimem
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

SESSIONS = ("s0", "s1", "s2")

_INGEST = textwrap.dedent(
    """
    import os, random, sys
    sys.path[:0] = [os.environ["EPIMEM_TEST_ROOT"], os.path.join(os.environ["EPIMEM_TEST_ROOT"], "tests")]
    from api.facade import Epimem
    from helpers.builders import message
    run, sessions = int(sys.argv[1]), sys.argv[2].split(",")
    service = Epimem.from_settings(background=True)
    print("ready", flush=True)
    rng = random.Random(run)
    for step in range(10_000):
        session = sessions[step % len(sessions)]
        start = run * 1000 + step * 4
        batch = [message(i, session=session) for i in range(start, start + rng.randint(1, 6))]
        service.add_messages("g", session, batch)
        print("ack", session, " ".join(m["id"] for m in batch), flush=True)
        if rng.random() < 0.15:
            service.flush("g", session)
    """
)


def sent_content(session: str, message_id: str) -> str:
    return str(message(int(message_id.rsplit("-m", 1)[1]), session=session)["content"])


def check_after_restart(
    service: Epimem, group_id: str, acked: Mapping[str, set[str]], *, embedder: SentenceTransformerEmbedder
) -> int:
    """Everything acknowledged is there, verbatim; everything is in exactly one episode; every
    collection opens and answers a query. Returns the number of stored messages."""
    stored = {
        s: {m.message.id: m.message.content for m in service.memory.store.log.list_messages(group_id, s)}
        for s in SESSIONS
    }
    for session in SESSIONS:
        missing = acked[session] - set(stored[session])
        assert not missing, f"acknowledged messages lost: {sorted(missing)[:5]}"
        # Stored but never acknowledged (killed between the write and the answer) is allowed,
        # as long as it is what was sent.
        assert all(content == sent_content(session, mid) for mid, content in stored[session].items())
    assert_consistent(service, group_id, stored, flushed=True)
    probe = embedder.embed_query("a note about hiking")
    # every collection of every engine, not only the ones our code paths open
    for engine in service.memory.store.connection.engines:
        for collection in engine.client.list_collections():
            opened = engine.client.get_collection(collection.name, embedding_function=None)
            count = opened.count()
            if count and collection.name.startswith(("epm-p-", "epm-i-")):
                result = opened.query(query_embeddings=[np.asarray(probe)], n_results=min(3, count))
                assert result["ids"][0], collection.name
    assert service.search(group_id, "a note about hiking", k=3)
    return sum(len(v) for v in stored.values())


@pytest.mark.slow
def test_kill_9_while_ingesting_through_the_facade(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    data_dir = tmp_path / "data"
    acked: dict[str, set[str]] = {s: set() for s in SESSIONS}
    rng = random.Random(7)
    for run in range(3):
        process = subprocess.Popen(
            [sys.executable, "-c", _INGEST, str(run), ",".join(SESSIONS)],
            env=child_env(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        wanted = rng.randint(3, 25)  # a random point: mid-add, mid-formation, mid-flush
        seen = 0
        while seen < wanted:
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            _, session, *ids = line.split()
            acked[session].update(ids)
            seen += 1
        time.sleep(rng.random() * 0.3)
        process.send_signal(signal.SIGKILL)
        rest, _ = process.communicate(timeout=30)
        for line in rest.splitlines():  # acknowledged just before the kill
            if line.startswith("ack "):
                _, session, *ids = line.split()
                acked[session].update(ids)
    service = Epimem.from_settings(background=False, embedder=embedder, data_dir=data_dir, episode_idle_seconds=0.5)
    time.sleep(0.6)  # the sessions went quiet while no server ran: the recovery forms their open tails too
    service.recover()
    for session in SESSIONS:
        assert service.pending_messages("g", session) == 0, "recovery left messages pending"
    assert check_after_restart(service, "g", acked, embedder=embedder) >= sum(len(v) for v in acked.values())
    service.close()


# -- the real HTTP server --------------------------------------------------------------------------------------


def post_batch(client: httpx.Client, base: str, group_id: str, session: str, batch: list[dict[str, Any]]) -> bool:
    """True when the server acknowledged the batch (2xx)."""
    try:
        response = client.post(f"{base}/v1/groups/{group_id}/sessions/{session}/messages", json={"messages": batch})
    except httpx.TransportError:
        return False
    assert response.status_code < 500 or response.status_code == 503, response.text
    return response.is_success


@pytest.mark.slow
def test_kill_9_the_http_server_while_ingesting(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    data_dir = tmp_path / "data"
    server = ServerProcess.uvicorn(child_env(data_dir), log=tmp_path / "server.log")
    acked: dict[str, set[str]] = {s: set() for s in SESSIONS}
    rng = random.Random(11)
    step = 0
    with httpx.Client(timeout=30) as client:
        for _run in range(2):
            server.start()
            kill_at = time.monotonic() + rng.uniform(1.0, 3.0)
            while time.monotonic() < kill_at:
                session = SESSIONS[step % len(SESSIONS)]
                batch = [message(i, session=session) for i in range(step * 4, step * 4 + rng.randint(1, 6))]
                if post_batch(client, server.url, "g", session, batch):
                    acked[session].update(m["id"] for m in batch)
                if rng.random() < 0.15:
                    client.post(f"{server.url}/v1/groups/g/sessions/{session}/flush")
                step += 1
            server.kill()
        # The startup recovery finishes what the kills interrupted, and forms what went quiet meanwhile.
        quiet = {**child_env(data_dir), "EPIMEM_EPISODE_IDLE_SECONDS": "1"}
        server = ServerProcess.uvicorn(quiet, log=tmp_path / "server.log")
        time.sleep(1.2)
        server.start()
        server.wait_recovered()
        server.stop()
    service = Epimem.from_settings(background=False, embedder=embedder, data_dir=data_dir)
    for session in SESSIONS:
        assert service.pending_messages("g", session) == 0, "the restarted server left messages pending"
    check_after_restart(service, "g", acked, embedder=embedder)
    service.close()
