"""LLM episode generation against a real local HTTP server speaking the OpenAI API: every failure
mode ends with a valid episode and the right stats; the service uses the LLM end to end."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from helpers import builders
from helpers.checks import formed as formed_episodes
from helpers.fake_openai import FakeOpenAI, Reply, default_responder, episode_from_prompt, is_segmentation

from api.composition import build_generator, build_segmenter, llm_client
from api.facade import Epimem
from api.settings import Settings
from memory.episodes.generation import (
    GenerationJob,
    GeneratorStats,
    OfflineEpisodeGenerator,
    batch_generate_episodes,
    episode_id_for,
    validate_episode,
)
from memory.episodes.llm_generator import LLMEpisodeGenerator
from memory.episodes.llm_segmenter import LLMSegmenter
from memory.episodes.prompts import PROMPT_VERSION
from memory.episodes.segmentation import HeuristicSegmenter, SegmentationPolicy
from memory.llm import client as client_module
from memory.llm.client import LLMClient
from memory.models import BoundaryReason, Episode, GenerationMethod, Message, Segment

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
POLICY = SegmentationPolicy()
GOOD = {
    "title": "Caroline tells Melanie about the LGBTQ support group",
    "content": "On 7 May 2023 Caroline went to an LGBTQ support group; Melanie called it brave.",
    "timestamp": "2023-05-08T13:56:00Z",
}


@pytest.fixture
def llm_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def make_client(server: FakeOpenAI, **options: object) -> LLMClient:
    values: dict = {"timeout_s": 60, "max_retries": 2, "backoff_s": 0.01, "concurrency": 4}
    values.update(options)
    return LLMClient(model="test-model", base_url=server.url, api_key="test", **values)


def segment(n: int = 2, *, start: datetime = T0, reason: BoundaryReason = BoundaryReason.TOPIC_SHIFT) -> Segment:
    texts = ["I went to the LGBTQ support group yesterday.", "That's brave, Caroline!", "Thanks, Mel!"]
    return Segment(
        messages=tuple(
            Message(
                id=f"m{i}",
                content=texts[i % len(texts)],
                producer_id=["Caroline", "Melanie"][i % 2],
                produced_for_id=["Melanie", "Caroline"][i % 2],
                timestamp=start + timedelta(minutes=i),
            )
            for i in range(n)
        ),
        boundary_reason=reason,
    )


def generate(generator: LLMEpisodeGenerator, seg: Segment) -> Episode:
    episode_id = episode_id_for("g", "s", seg.message_ids)
    episode = generator.generate(seg, group_id="g", session_id="s", episode_id=episode_id)
    assert validate_episode(episode, seg, episode_id=episode_id, group_id="g", session_id="s") == []
    return episode


def test_a_good_episode_is_used_as_written_and_the_request_is_json_mode(llm_server: FakeOpenAI) -> None:
    llm_server.script(Reply(content=GOOD, usage=(321, 54)))
    generator = LLMEpisodeGenerator(make_client(llm_server))
    episode = generate(generator, segment())
    assert episode.generation is GenerationMethod.LLM
    assert (episode.title, episode.content) == (GOOD["title"], GOOD["content"])
    assert episode.timestamp == T0 and episode.timestamp.tzinfo is not None
    (request,) = llm_server.requests
    assert request["model"] == "test-model"
    assert request["response_format"] == {"type": "json_object"}
    prompt = request["messages"][-1]["content"]
    assert "[Mon 2023-05-08 13:56 UTC] Caroline (to Melanie): I went to the LGBTQ support group yesterday." in prompt
    assert "moved on to another topic" in prompt  # the boundary reason
    stats = generator.stats()
    assert (stats.calls, stats.retries, stats.fallbacks, stats.episodes) == (1, 0, 0, 1)
    assert (stats.prompt_tokens, stats.completion_tokens) == (321, 54)
    assert stats.latency_seconds > 0 and stats.model == "test-model" and stats.prompt_version == PROMPT_VERSION


FUTURE = (datetime.now(UTC) + timedelta(days=400)).isoformat()
NEVER = threading.Event()  # a reply held on it is never sent: the client's timeout is what ends the request


@pytest.mark.parametrize(
    ("replies", "method", "errors", "retries", "requests", "repaired"),
    [
        pytest.param(
            [Reply(content="Sure! Here is the episode: title=...")],
            "fallback",
            {"invalid_json": 1},
            0,
            1,
            False,
            id="invalid-json",
        ),
        pytest.param(
            [Reply(content={"title": "Only a title"})], "fallback", {"schema": 1}, 0, 1, False, id="missing-content"
        ),
        pytest.param(
            [Reply(content={"title": "  ", "content": "   "})],
            "fallback",
            {"schema": 1},
            0,
            1,
            False,
            id="blank-content",
        ),
        pytest.param([Reply(content={"content": GOOD["content"]})], "llm", {}, 0, 1, True, id="missing-title"),
        pytest.param(
            [Reply(content={**GOOD, "timestamp": {"day": 8}})], "llm", {}, 0, 1, True, id="wrong-typed-timestamp"
        ),
        pytest.param([Reply(content={**GOOD, "timestamp": 1683554160})], "llm", {}, 0, 1, True, id="numeric-timestamp"),
        pytest.param([Reply(content={**GOOD, "timestamp": FUTURE})], "llm", {}, 0, 1, True, id="future-timestamp"),
        pytest.param(
            [Reply(content={**GOOD, "timestamp": "1999-01-01T00:00:00Z"})],
            "llm",
            {},
            0,
            1,
            True,
            id="ancient-timestamp",
        ),
        pytest.param(
            [Reply(content={**GOOD, "timestamp": "around teatime"})], "llm", {}, 0, 1, True, id="unreadable-timestamp"
        ),
        pytest.param(
            [Reply(status=429, headers={"Retry-After": "0"}), Reply(content=GOOD)],
            "llm",
            {},
            1,
            2,
            False,
            id="429-then-success",
        ),
        pytest.param(
            [Reply(status=503), Reply(status=500), Reply(content=GOOD)], "llm", {}, 2, 3, False, id="5xx-then-success"
        ),
        pytest.param([Reply(status=500)] * 3, "fallback", {"status_500": 1}, 2, 3, False, id="500"),
        pytest.param([Reply(status=401)], "fallback", {"status_401": 1}, 0, 1, False, id="401-not-retried"),
        pytest.param([Reply(hold=NEVER)] * 3, "fallback", {"timeout": 1}, 2, 3, False, id="slower-than-timeout"),
        pytest.param(
            [Reply(body="<html>bad gateway</html>")],
            "fallback",
            {"bad_response": 1},
            0,
            1,
            False,
            id="not-a-completion",
        ),
    ],
)
def test_every_llm_outcome_ends_in_a_valid_episode_with_the_right_stats(
    llm_server: FakeOpenAI,
    replies: list[Reply],
    method: str,
    errors: dict[str, int],
    retries: int,
    requests: int,
    repaired: bool,
) -> None:
    llm_server.script(*replies)
    unanswered = any(reply.hold is NEVER for reply in replies)
    generator = LLMEpisodeGenerator(make_client(llm_server, timeout_s=0.5 if unanswered else 60))
    seg = segment(3)
    episode = generate(generator, seg)
    assert episode.generation.value == method
    assert episode.source_message_ids == ("m0", "m1", "m2") and episode.message_count == 3
    if method == "fallback":
        # Built offline from the messages: who said what, with absolute dates.
        assert "Caroline said to Melanie: I went to the LGBTQ support group yesterday (7 May 2023)." in episode.content
    else:
        assert episode.content == GOOD["content"]
        answer = replies[-1].content
        if isinstance(answer, dict) and "title" in answer:
            assert episode.title == GOOD["title"]
        else:  # repaired from the messages
            assert episode.title.startswith("Caroline and Melanie, 8 May 2023: ")
    assert episode.timestamp == T0  # the earliest message's time whenever the LLM's is absent or implausible
    assert len(llm_server.requests) == requests
    stats = generator.stats()
    assert stats.calls == 1 and stats.episodes == 1
    assert stats.retries == retries
    assert stats.fallbacks == (1 if method == "fallback" else 0)
    assert stats.errors == errors
    assert stats.repairs == (1 if repaired else 0)


def test_a_plausible_llm_timestamp_within_the_margin_is_kept(llm_server: FakeOpenAI) -> None:
    llm_server.script(Reply(content={**GOOD, "timestamp": "2023-05-07T18:00:00+02:00"}))
    generator = LLMEpisodeGenerator(make_client(llm_server), timestamp_margin=timedelta(days=2))
    episode = generate(generator, segment())
    assert episode.timestamp == datetime(2023, 5, 7, 16, 0, tzinfo=UTC)


def test_batch_isolates_failures_and_respects_the_concurrency_limit() -> None:
    # The first three answers wait for each other: they can only all come when three requests are in flight at
    # once (a client that sent them one after another would break the barrier: those episodes would fall back).
    together = threading.Barrier(3, timeout=120)
    arrivals = itertools.count(1)

    def respond(request: dict) -> Reply:
        text = request["messages"][-1]["content"]
        if "FAIL" in text:
            return Reply(status=500)
        if next(arrivals) <= 3:
            try:
                together.wait()
            except threading.BrokenBarrierError:
                return Reply(status=503)
        return Reply(content=episode_from_prompt(request).content)

    with FakeOpenAI(respond) as server:
        generator = LLMEpisodeGenerator(make_client(server, concurrency=3, max_retries=0, timeout_s=300))
        segments = [
            Segment(
                messages=(Message(id=f"m{i}", content="FAIL" if i == 4 else f"Topic {i} is great", timestamp=T0),),
                boundary_reason=BoundaryReason.FLUSH,
            )
            for i in range(9)
        ]
        jobs = [GenerationJob(s, "g", "s", episode_id_for("g", "s", s.message_ids)) for s in segments]
        episodes = batch_generate_episodes(generator, jobs, concurrency=8)
    assert [e.uuid for e in episodes] == [job.episode_id for job in jobs]
    assert [e.generation for e in episodes] == [GenerationMethod.LLM] * 4 + [GenerationMethod.FALLBACK] + [
        GenerationMethod.LLM
    ] * 4
    assert "Topic 7 is great" in episodes[7].content
    assert server.max_in_flight == 3  # three at once, never more: the client's semaphore, though the batch ran 8
    stats = generator.stats()
    assert (stats.calls, stats.fallbacks, stats.errors) == (9, 1, {"status_500": 1})


def test_build_generator_and_segmenter_follow_the_settings(
    llm_server: FakeOpenAI, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closers = ExitStack()
    plain = Settings(data_dir=tmp_path)
    assert llm_client(plain, closers) is None
    assert isinstance(build_generator(plain, None), OfflineEpisodeGenerator)
    assert build_segmenter(plain, POLICY, None)[1] is None
    assert isinstance(build_segmenter(plain, POLICY, None)[0], HeuristicSegmenter)
    monkeypatch.setenv("EPIMEM_LLM_BASE_URL", llm_server.url)
    monkeypatch.setenv("EPIMEM_LLM_MODEL", "local-model")
    monkeypatch.setenv("EPIMEM_LLM_API_KEY", "secret-key")
    settings = Settings(data_dir=tmp_path)
    assert settings.llm_configured
    client = llm_client(settings, closers)
    assert client is not None
    generator = build_generator(settings, client)
    assert isinstance(generator, LLMEpisodeGenerator)
    stats = generator.stats()
    assert isinstance(stats, GeneratorStats) and stats.model == "local-model"
    segmenter, reporting = build_segmenter(settings, POLICY, client)
    assert isinstance(segmenter, LLMSegmenter) and reporting is segmenter
    assert segmenter.window == settings.llm_segmenter_window
    off = Settings(data_dir=tmp_path, llm_segmentation=False)
    assert isinstance(build_segmenter(off, POLICY, client)[0], HeuristicSegmenter)
    generate(generator, segment())
    assert llm_server.requests[0]["model"] == "local-model"
    closers.close()
    assert client.closed


def llm_settings(server: FakeOpenAI, **more: object) -> dict[str, object]:
    return {
        "llm_base_url": server.url,
        "llm_api_key": "test",
        "llm_model": "local-model",
        "llm_timeout_s": 5,
        "llm_retry_backoff_s": 0.01,
        **more,
    }


conversation = partial(
    builders.messages,
    start=T0,
    text="Message {i}: let me tell you about {topic}.",
    topics=("the zeppelin museum in Friedrichshafen", "a sourdough starter named Bubbles"),
)


def test_flush_produces_llm_episodes_that_are_stored_and_searchable(
    make_service, llm_server: FakeOpenAI, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients: list[LLMClient] = []
    monkeypatch.setattr(
        client_module, "LLMClient", lambda **options: clients.append(LLMClient(**options)) or clients[-1]
    )
    service: Epimem = make_service(**llm_settings(llm_server))
    assert set(service.stats().llm) == {"generator", "segmenter"}  # the LLM segmenter reports its calls
    messages = conversation(8)
    service.add_messages(group_id, "s1", messages)
    episodes = service.flush(group_id, "s1")
    # The fake segmenter answers runs of 3: [1-3], [4-6], [7-8].
    assert [e.source_message_ids for e in episodes] == [("m0", "m1", "m2"), ("m3", "m4", "m5"), ("m6", "m7")]
    assert [e.boundary_reason for e in episodes] == [BoundaryReason.LLM, BoundaryReason.LLM, BoundaryReason.FLUSH]
    assert all(e.generation is GenerationMethod.LLM and e.title.startswith("LLM episode") for e in episodes)
    assert len(llm_server.requests_of("segment")) == 1 and len(llm_server.requests_of("episode")) == 3
    stored = service.timeline(group_id).episodes
    assert [e.uuid for e in stored] == [e.uuid for e in episodes]
    assert all(e.generation is GenerationMethod.LLM for e in stored)
    assert service.get_episode(group_id, "s1", episodes[0].uuid).content == episodes[0].content
    hits = service.search(group_id, "sourdough starter Bubbles", k=1)
    assert hits and "Bubbles" in hits[0].episode.content and hits[0].episode.generation is GenerationMethod.LLM
    assert service.pending_messages(group_id, "s1") == 0
    assert service.generator_stats().calls == 3
    assert service.stats().llm["segmenter"].calls == 1
    service.close()  # and the LLM client's connections with it
    assert len(clients) == 1 and clients[0].closed


def test_a_failing_llm_still_forms_every_message_into_fallback_episodes(
    make_service, llm_server: FakeOpenAI, group_id: str
) -> None:
    service: Epimem = make_service(**llm_settings(llm_server, llm_max_retries=0))
    llm_server.responder = lambda request: Reply(status=503)
    service.add_messages(group_id, "s1", conversation(6))
    episodes = service.flush(group_id, "s1")
    assert sorted(m for e in episodes for m in e.source_message_ids) == [f"m{i}" for i in range(6)]
    assert all(e.generation is GenerationMethod.FALLBACK for e in episodes)
    assert service.search(group_id, "zeppelin museum", k=1)[0].episode.generation is GenerationMethod.FALLBACK
    assert service.generator_stats().fallbacks == len(episodes)
    assert service.stats().llm["segmenter"].fallbacks == 1


def test_threshold_formation_uses_the_llm_in_the_background(
    make_service, llm_server: FakeOpenAI, group_id: str
) -> None:
    service: Epimem = make_service(background=True, auto_flush_pending=6, **llm_settings(llm_server))
    service.add_messages(group_id, "s1", conversation(8, start=datetime.now(UTC) - timedelta(minutes=10)))
    assert service.wait_idle(timeout=60)
    formed = formed_episodes(service.timeline(group_id))
    assert formed and all(e.generation is GenerationMethod.LLM for e in formed)
    # The open tail (the last run the segmenter proposed) waits for more messages or a flush.
    assert service.pending_messages(group_id, "s1") == 8 - sum(e.message_count for e in formed) > 0
    rest = service.flush(group_id, "s1")
    assert sorted(m for e in formed + rest for m in e.source_message_ids) == sorted(f"m{i}" for i in range(8))
    assert any(is_segmentation(r) for r in llm_server.requests)


@pytest.mark.slow
def test_an_idle_session_is_formed_by_the_llm_and_adds_never_wait_for_it(make_service, group_id: str) -> None:
    """With a slow LLM: the add answers long before the LLM would, the messages are recalled at once, and the
    idle timer forms the session's episodes through the LLM in the background."""

    def slow(request: dict) -> Reply:
        reply = default_responder(request)
        return Reply(content=reply.content, delay=1.0)

    with FakeOpenAI(slow) as server:
        service: Epimem = make_service(background=True, episode_idle_seconds=1.0, **llm_settings(server))
        service.add_messages(group_id, "s1", conversation(4, start=datetime.now(UTC) - timedelta(minutes=5)))
        assert not server.requests  # the add answered without asking the LLM anything
        hits = service.search(group_id, "the zeppelin museum", k=3)
        assert hits and hits[0].pending
        deadline = time.monotonic() + 60
        while service.pending_messages(group_id, "s1") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert service.wait_idle(timeout=60)
        formed = formed_episodes(service.timeline(group_id))
        assert formed and all(e.generation is GenerationMethod.LLM for e in formed)
        assert sorted(m for e in formed for m in e.source_message_ids) == [f"m{i}" for i in range(4)]
        assert not service.search(group_id, "the zeppelin museum", k=3)[0].pending
