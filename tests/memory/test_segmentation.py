"""Boundary detection: the heuristic segmenter and the LLM segmenter (against a real local HTTP
server speaking the OpenAI API). Whatever happens, no message is ever dropped or duplicated."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from helpers.fake_openai import FakeOpenAI, Reply, prompt_text, segmentation_in_runs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.episodes.llm_segmenter import LLMSegmenter, parse_segmentation
from memory.episodes.segmentation import HeuristicSegmenter, SegmentationPolicy, Segmenter
from memory.llm.client import LLMClient, LLMError
from memory.models import BoundaryReason, Message, Segment

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
POLICY = SegmentationPolicy(min_messages=2, max_messages=5, time_gap=timedelta(minutes=30))


def messages_at(minutes: Sequence[float]) -> list[Message]:
    return [
        Message(id=f"m{i}", content=f"message number {i}", timestamp=T0 + timedelta(minutes=m))
        for i, m in enumerate(minutes)
    ]


def assert_partition(segments: list[Segment], messages: Sequence[Message], policy: SegmentationPolicy) -> None:
    """Every message exactly once, segments in time order, none longer than the maximum."""
    ids = [m for s in segments for m in s.message_ids]
    assert sorted(ids) == sorted(m.id for m in messages)
    assert len(ids) == len(set(ids))
    times = [m.timestamp for s in segments for m in s.messages]
    assert times == sorted(times)
    assert all(1 <= len(s.messages) <= policy.max_messages for s in segments)


# -- heuristic ---------------------------------------------------------------------------------


def test_heuristic_cuts_on_time_gap_size_and_topic() -> None:
    segmenter: Segmenter = HeuristicSegmenter(POLICY)
    gap = segmenter.segment(messages_at([0, 1, 2, 120, 121]), final_reason=BoundaryReason.END_OF_SESSION)
    assert [s.message_ids for s in gap] == [("m0", "m1", "m2"), ("m3", "m4")]
    assert [s.boundary_reason for s in gap] == [BoundaryReason.TIME_GAP, BoundaryReason.END_OF_SESSION]
    size = segmenter.segment(messages_at(range(7)))
    assert [len(s.messages) for s in size] == [5, 2] and size[0].boundary_reason is BoundaryReason.MAX_SIZE
    vectors = np.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
    topic = segmenter.segment(messages_at(range(6)), vectors=vectors)
    assert [s.message_ids for s in topic] == [("m0", "m1", "m2"), ("m3", "m4", "m5")]
    assert topic[0].boundary_reason is BoundaryReason.TOPIC_SHIFT


def test_heuristic_keeps_a_short_segment_after_a_time_gap_rather_than_dropping_it() -> None:
    segments = HeuristicSegmenter(POLICY).segment(messages_at([0, 1, 90]))
    assert [s.message_ids for s in segments] == [("m0", "m1"), ("m2",)]


@settings(max_examples=150, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0, max_value=240, allow_nan=False), min_size=1, max_size=60),
    shuffle=st.randoms(use_true_random=False),
    min_messages=st.integers(1, 4),
    max_messages=st.integers(1, 12),
    with_vectors=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_heuristic_never_drops_or_duplicates_a_message(
    gaps: list[float], shuffle, min_messages: int, max_messages: int, with_vectors: bool, seed: int
) -> None:
    policy = SegmentationPolicy(min_messages=min_messages, max_messages=max_messages, topic_window=2)
    messages = messages_at(np.cumsum(gaps).tolist())
    shuffle.shuffle(messages)  # arrival order is not event order
    vectors = np.random.default_rng(seed).normal(size=(len(messages), 8)) if with_vectors else None
    segments = HeuristicSegmenter(policy).segment(messages, vectors=vectors)
    assert_partition(segments, messages, policy)
    assert segments[-1].boundary_reason is BoundaryReason.FLUSH


# -- LLM -----------------------------------------------------------------------------------------


@pytest.fixture
def llm_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def llm_segmenter(
    server: FakeOpenAI, *, window: int = 40, policy: SegmentationPolicy = POLICY, timeout_s: float = 60
) -> LLMSegmenter:
    client = LLMClient(
        model="seg", base_url=server.url, api_key="test", timeout_s=timeout_s, max_retries=0, backoff_s=0
    )
    return LLMSegmenter(client, policy=policy, window=window)


NEVER = threading.Event()  # a reply held on it is never sent


def answer(*groups: list[int]) -> Reply:
    return Reply(content={"episodes": [{"indices": g, "topic": f"t{g[0]}"} for g in groups]})


def test_llm_segments_are_used_with_their_topics(llm_server: FakeOpenAI) -> None:
    llm_server.script(answer([1, 2], [3, 4, 5], [6]))
    messages = messages_at(range(6))
    segments = llm_segmenter(llm_server).segment(messages, final_reason=BoundaryReason.END_OF_SESSION)
    assert [s.message_ids for s in segments] == [("m0", "m1"), ("m2", "m3", "m4"), ("m5",)]
    assert [s.boundary_reason for s in segments] == [
        BoundaryReason.LLM,
        BoundaryReason.LLM,
        BoundaryReason.END_OF_SESSION,
    ]
    assert [s.topic for s in segments] == ["t1", "t3", "t6"]
    (request,) = llm_server.requests
    assert request["response_format"] == {"type": "json_object"}
    assert "6. [Mon 2023-05-08 14:01 UTC] user: message number 5" in prompt_text(request)


def test_time_gaps_are_cut_before_asking_and_windows_carry_the_open_segment(llm_server: FakeOpenAI) -> None:
    llm_server.responder = segmentation_in_runs(3)
    # 10 messages, a 2-hour gap, 3 more; windows of 4 messages.
    messages = messages_at([*range(10), *range(130, 133)])
    segmenter = llm_segmenter(llm_server, window=4)
    segments = segmenter.segment(messages)
    assert_partition(segments, messages, POLICY)
    # Stretch 1: window m0-m3 -> [m0-m2] kept, m3 carried; m3-m6 -> [m3-m5]; m6-m9 -> [m6-m8]; m9 alone.
    # Stretch 2 (after the gap): one window m10-m12.
    assert [s.message_ids for s in segments] == [
        ("m0", "m1", "m2"),
        ("m3", "m4", "m5"),
        ("m6", "m7", "m8"),
        ("m9",),
        ("m10", "m11", "m12"),
    ]
    assert segments[3].boundary_reason is BoundaryReason.TIME_GAP
    assert segments[-1].boundary_reason is BoundaryReason.FLUSH
    counts = [int(prompt_text(r).split("(1 to ")[1].split(")")[0]) for r in llm_server.requests]
    assert counts == [4, 4, 4, 3]
    assert segmenter.stats().calls == 4 and segmenter.stats().fallbacks == 0


def test_an_oversized_llm_segment_is_capped_at_the_maximum(llm_server: FakeOpenAI) -> None:
    llm_server.script(answer(list(range(1, 13))))
    segments = llm_segmenter(llm_server).segment(messages_at(range(12)))
    assert [len(s.messages) for s in segments] == [5, 5, 2]
    assert [s.boundary_reason for s in segments] == [
        BoundaryReason.MAX_SIZE,
        BoundaryReason.MAX_SIZE,
        BoundaryReason.FLUSH,
    ]


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (answer([1, 2], [4, 5, 6]), "schema"),  # message 3 missing
        (answer([1, 2, 3], [3, 4, 5, 6]), "schema"),  # message 3 twice
        (answer([1, 3], [2, 4], [5, 6]), "schema"),  # not consecutive
        (answer([1, 2, 3], [4, 5, 6, 7]), "schema"),  # out of range
        (Reply(content={"episodes": [{"indices": ["one", "two"]}]}), "schema"),
        (Reply(content={"segments": "all of them"}), "schema"),
        (Reply(content="[1, 2, 3"), "invalid_json"),
        (Reply(status=500), "status_500"),
        (Reply(hold=NEVER), "timeout"),  # never answered: the client's timeout ends it
    ],
    ids=["gap", "overlap", "interleaved", "out-of-range", "not-numbers", "not-a-list", "invalid-json", "500", "slow"],
)
def test_an_invalid_or_failed_llm_answer_falls_back_to_the_heuristic(
    llm_server: FakeOpenAI, reply: Reply, kind: str
) -> None:
    llm_server.script(reply)
    messages = messages_at([0, 1, 2, 3, 4, 5])
    segmenter = llm_segmenter(llm_server, timeout_s=0.5 if reply.hold is NEVER else 60)
    segments = segmenter.segment(messages)
    assert [s.message_ids for s in segments] == [s.message_ids for s in HeuristicSegmenter(POLICY).segment(messages)]
    stats = segmenter.stats()
    assert (stats.calls, stats.fallbacks, stats.errors) == (1, 1, {kind: 1})


def test_unambiguous_answers_are_repaired() -> None:
    zero_based = parse_segmentation({"episodes": [{"indices": [0, 1]}, {"indices": [2]}]}, 3)
    assert [p.size for p in zero_based] == [2, 1]
    shuffled = parse_segmentation({"episodes": [{"indices": ["3", 4.0]}, {"indices": [2, 1], "topic": " a\n b "}]}, 4)
    assert [(p.size, p.topic) for p in shuffled] == [(2, "a b"), (2, None)]
    with pytest.raises(LLMError):
        parse_segmentation({"episodes": [{"indices": [True, 2]}]}, 2)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    groups=st.lists(st.lists(st.integers(-1, 25), max_size=8), max_size=6),
    n=st.integers(1, 20),
    window=st.integers(2, 9),
)
def test_whatever_the_llm_answers_no_message_is_lost(
    llm_server: FakeOpenAI, groups: list[list[int]], n: int, window: int
) -> None:
    body = json.dumps({"episodes": [{"indices": g} for g in groups]})
    llm_server.responder = lambda request: Reply(content=body)
    messages = messages_at(range(n))
    segments = llm_segmenter(llm_server, window=window).segment(messages, vectors=np.ones((n, 4)))
    assert_partition(segments, messages, POLICY)
