"""Formation is invisible to readers: while sessions' episodes form, search and context over HTTP never miss a
message whose add was acknowledged before the read began. Real Chroma (embedded, and a server with a second
epimem service writing the same group), real HTTP through uvicorn, the real model.

Writers add two messages at a time and flush, round after round; a reader polls search and context for messages
already acknowledged, each by a word no other message holds, until it has made ``POLLS`` reads. A writer starts a
round only when the reader has granted it one (every ``POLLS_PER_ROUND`` polls), so the group grows with the reads
(not with how fast this machine writes) and every formation runs while reads are made."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from helpers.servers import AppServer

from api.facade import Epimem

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

POLLS = int(os.environ.get("EPIMEM_FORMATION_POLLS", "300"))
POLLS_PER_ROUND = 5
T0 = datetime(2024, 6, 1, 9, 0, tzinfo=UTC)
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "zu", "pe", "do", "fa"]


def codeword(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(5))


class Writer:
    """Adds two messages per call to a rotating session and flushes after every third call, until told to stop;
    what its adds acknowledged is in ``acknowledged`` (message id -> its code word) once the add returned."""

    def __init__(self, service: Epimem, group_id: str, name: str, seed: int) -> None:
        self.service = service
        self.group_id = group_id
        self.name = name
        self.rng = random.Random(seed)
        self.acknowledged: dict[str, tuple[str, str]] = {}  # message id -> (session, code word)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.granted = threading.Semaphore(0)  # rounds the reader has allowed
        self.first_add = threading.Event()
        self.rounds = 0
        self.errors: list[BaseException] = []
        self.used: set[str] = set()

    def fresh_word(self) -> str:
        while True:
            word = codeword(self.rng)
            if word not in self.used:
                self.used.add(word)
                return word

    def run(self) -> None:
        count = 0
        try:
            while not self.stop.is_set():
                if not self.granted.acquire(timeout=0.5):
                    continue
                session = f"{self.name}-s{self.rounds % 3}"
                for _ in range(3):
                    batch = []
                    for _ in range(2):
                        word = self.fresh_word()
                        stamp = T0 + timedelta(minutes=count)
                        batch.append(
                            {
                                "id": f"{self.name}-m{count}",
                                "content": f"The code word {word} was chosen for the {self.name} note {count}.",
                                "producer_id": "ana" if count % 2 else "ben",
                                "timestamp": stamp.isoformat(),
                            }
                        )
                        count += 1
                    self.service.add_messages(self.group_id, session, batch)
                    with self.lock:
                        for item in batch:
                            self.acknowledged[item["id"]] = (session, item["content"].split()[3])
                    self.first_add.set()
                self.service.flush(self.group_id, session)
                self.rounds += 1
        except BaseException as error:  # noqa: BLE001 - re-raised by the test
            self.errors.append(error)

    def sample(self, rng: random.Random) -> tuple[str, str, str] | None:
        with self.lock:
            if not self.acknowledged:
                return None
            message_id = rng.choice(list(self.acknowledged))
            session, word = self.acknowledged[message_id]
        return message_id, session, word


def found_by_search(client: httpx.Client, group_id: str, word: str, message_id: str) -> bool:
    response = client.post(f"/v1/groups/{group_id}/search", json={"query": word, "k": 10})
    assert response.status_code == 200, response.text
    return any(message_id in hit["episode"]["source_message_ids"] for hit in response.json()["hits"])


def found_by_context(client: httpx.Client, group_id: str, word: str, message_id: str) -> bool:
    body = {"query": word, "token_budget": 400}
    response = client.post(f"/v1/groups/{group_id}/context", json=body)
    assert response.status_code == 200, response.text
    return any(message_id in citation["message_ids"] for citation in response.json()["citations"])


def test_search_and_context_never_miss_an_acknowledged_message_while_episodes_form(
    backend: str, make_service: Callable[..., Epimem], serve: Callable[..., AppServer], group_id: str
) -> None:
    options: dict[str, Any] = {"auto_flush_pending": 1000, "episode_idle_seconds": 3600}
    if backend == "server":
        options["coordination"] = "lease"
    service = make_service(**options)
    url = serve(service).url
    writers = [Writer(service, group_id, "one", seed=1)]
    if backend == "server":  # another epimem on the same Chroma server writes the same group
        writers.append(Writer(make_service(node_id="second", **options), group_id, "two", seed=2))
    else:  # embedded Chroma is one process per folder: another thread of the same service
        writers.append(Writer(service, group_id, "two", seed=2))
    threads = [threading.Thread(target=w.run) for w in writers]
    for writer in writers:
        writer.granted.release()
    for thread in threads:
        thread.start()
    rng = random.Random(7)
    misses: list[tuple[str, str, str]] = []
    polls = 0
    client = httpx.Client(base_url=url, timeout=120)  # one connection: a client per read spent more than the read
    try:
        while polls < POLLS:
            assert all(thread.is_alive() for thread in threads), [e for w in writers for e in w.errors]
            picked = writers[polls % len(writers)].sample(rng)
            if picked is None:
                writers[polls % len(writers)].first_add.wait(timeout=60)
                continue
            message_id, _session, word = picked
            how = "search" if polls % 2 == 0 else "context"
            check = found_by_search if how == "search" else found_by_context
            if not check(client, group_id, word, message_id):
                misses.append((how, message_id, word))
            polls += 1
            if polls % POLLS_PER_ROUND == 0:
                for writer in writers:
                    writer.granted.release()
    finally:
        client.close()
        for writer in writers:
            writer.stop.set()
        for thread in threads:
            thread.join(timeout=300)
    assert not [e for w in writers for e in w.errors]
    rounds = sum(w.rounds for w in writers)
    assert rounds >= 10, f"only {rounds} formations ran during the polls"
    missed = f"{len(misses)} of {polls} reads missed an acknowledged message ({rounds} formations): {misses[:5]}"
    assert not misses, missed
