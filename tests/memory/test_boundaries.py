"""Topic boundaries: the per-gap scorer (real bundled model), the selection with its size bounds,
time gaps as hard boundaries, the reason of every episode, and ``epimem segment`` by subprocess."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from helpers.docs_blocks import blocks
from helpers.paths import DOCS
from helpers.processes import epimem
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.episodes.boundaries import FEATURES, Turn, gap_features, gap_scores
from memory.episodes.segmentation import (
    SegmentationPolicy,
    choose_cuts,
    decide_gaps,
    selection_threshold,
    split_messages,
)
from memory.models import BoundaryReason, Message
from memory.text import message_line

T0 = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
DOC = DOCS / "episodes.md"

# Two people: pets, then (a clear shift) a trip, then (another shift) a job.
DIALOGUE = [
    ("ann", "do you have any pets at home?"),
    ("bob", "yes, two cats and an old dog named rex"),
    ("ann", "cats are great, mine sleeps on my keyboard all day"),
    ("bob", "ha, my dog does the same with my shoes"),
    ("ann", "by the way, where are you going for your summer vacation?"),
    ("bob", "we are flying to portugal for two weeks in july"),
    ("ann", "lisbon is lovely, try the custard tarts near the river"),
    ("bob", "we will, and we rent a car to drive down the coast"),
    ("ann", "what do you do for work these days?"),
    ("bob", "i am a nurse in the night shift at the hospital"),
    ("ann", "night shifts must be exhausting for your sleep"),
    ("bob", "it is hard but the pay is better and i like my team"),
]
SHIFTS = (4, 8)  # gap g = before message g


def messages_from(turns: Sequence[tuple[str, str]], minutes: Sequence[float] | None = None) -> list[Message]:
    minutes = minutes if minutes is not None else range(len(turns))
    return [
        Message(id=f"m{i}", content=text, producer_id=speaker, timestamp=T0 + timedelta(minutes=m))
        for i, ((speaker, text), m) in enumerate(zip(turns, minutes, strict=True))
    ]


def vectors_for(embedder: SentenceTransformerEmbedder, messages: Sequence[Message]) -> np.ndarray:
    return embedder.embed_batch([message_line(m) for m in messages])


# -- scores ------------------------------------------------------------------------------------------


def test_topic_shifts_score_higher_than_the_gaps_inside_a_topic(embedder: SentenceTransformerEmbedder) -> None:
    messages = messages_from(DIALOGUE)
    turns = [Turn(text=m.content, speaker=m.speaker, timestamp=m.timestamp) for m in messages]
    scores = gap_scores(turns, vectors_for(embedder, messages))
    assert scores.shape == (len(DIALOGUE) - 1,) and ((scores > 0) & (scores < 1)).all()
    shift = [scores[g - 1] for g in SHIFTS]
    inside = [scores[g - 1] for g in range(1, len(DIALOGUE)) if g not in SHIFTS]
    assert min(shift) > max(inside), (shift, inside)
    # an answer to a question continues its topic: the gap after "do you have any pets?" scores low
    assert scores[0] < 0.5


def test_features_and_fixed_terms_move_the_score_the_documented_way(embedder: SentenceTransformerEmbedder) -> None:
    messages = messages_from(DIALOGUE)
    vectors = vectors_for(embedder, messages)
    features = gap_features([Turn(text=m.content, speaker=m.speaker) for m in messages], vectors)
    assert features.shape == (len(DIALOGUE) - 1, len(FEATURES))
    asks = FEATURES.index("asks")
    assert features[SHIFTS[0] - 1, asks] == 1.0 and features[SHIFTS[0], asks] == 0.0
    base = [Turn(text=m.content, speaker=m.speaker, timestamp=m.timestamp) for m in messages]
    paused = [
        *base[:6],
        *(Turn(text=t.text, speaker=t.speaker, timestamp=t.timestamp + timedelta(minutes=20)) for t in base[6:]),
    ]
    same_speaker = [Turn(text=t.text, speaker="ann", timestamp=t.timestamp) for t in base]
    plain, pause, monologue = (gap_scores(t, vectors) for t in (base, paused, same_speaker))
    assert pause[5] > plain[5] and np.allclose(pause[:5], plain[:5])  # a 20-minute silence raises that gap only
    assert monologue[2] < plain[2]  # the same person going on makes a shift less likely
    with pytest.raises(ValueError, match="one vector per message"):
        gap_features(base, vectors[:-1])


# -- selection ---------------------------------------------------------------------------------------


def brute_force(gains: Sequence[float], min_size: int, max_size: int) -> float:
    n = len(gains) + 1
    best = -np.inf
    for count in range(n):
        for cuts in itertools.combinations(range(1, n), count):
            sizes = np.diff([0, *cuts, n])
            if sizes.max() <= max_size and sizes.min() >= min_size:
                best = max(best, sum(gains[c - 1] for c in cuts))
    return best


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    gains=st.lists(st.floats(-3, 3, allow_nan=False), min_size=0, max_size=11),
    min_size=st.integers(1, 4),
    max_size=st.integers(1, 8),
)
@example(gains=[1e-12, 1e-12], min_size=1, max_size=8)  # below the tie tolerance: no cut, 2e-12 short of the optimum
def test_selection_is_the_best_cut_set_within_the_size_bounds(gains: list[float], min_size: int, max_size: int) -> None:
    max_size = max(max_size, min_size)
    n = len(gains) + 1
    cuts = choose_cuts(np.array(gains), min_size, max_size)
    sizes = np.diff([0, *cuts, n])
    assert cuts == sorted(set(cuts)) and all(0 < c < n for c in cuts)
    assert sizes.max() <= max_size
    optimum = brute_force(gains, min_size, max_size)
    if optimum > -np.inf:  # some partition respects both bounds: the chosen one does, and is the best
        assert sizes.min() >= min_size
        # choose_cuts reads totals within 1e-12 as a tie (for longer first segments): up to that per decision
        assert sum(gains[c - 1] for c in cuts) == pytest.approx(optimum, abs=1e-12 * n)


def test_a_larger_target_places_fewer_topic_boundaries(embedder: SentenceTransformerEmbedder) -> None:
    messages = messages_from(DIALOGUE * 3)
    vectors = vectors_for(embedder, messages)

    def policy(target: float) -> SegmentationPolicy:
        return SegmentationPolicy(min_messages=1, max_messages=36, target_messages=target)

    counts = [sum(d.boundary for d in decide_gaps(messages, policy=policy(t), vectors=vectors)) for t in (2.5, 6, 30)]
    assert counts[0] >= counts[1] >= counts[2] and counts[0] > counts[2]
    assert selection_threshold(12) > selection_threshold(6) > selection_threshold(3)


# -- reasons and hard time gaps ----------------------------------------------------------------------


def test_every_episode_says_which_rule_ended_it(embedder: SentenceTransformerEmbedder) -> None:
    # 12 messages of the dialogue, then 2 hours of silence, then 9 near-identical messages
    minutes = [*range(12), *(120 + m for m in range(9))]
    turns = DIALOGUE + [("bob", "ok see you tomorrow at the hospital, bye")] * 9
    messages = messages_from(turns, minutes)
    vectors = vectors_for(embedder, messages)
    policy = SegmentationPolicy(min_messages=2, max_messages=5)
    segments = split_messages(messages, policy=policy, vectors=vectors, final_reason=BoundaryReason.END_OF_SESSION)
    decisions = {d.before.id: d for d in decide_gaps(messages, policy=policy, vectors=vectors)}
    threshold = 1 / (1 + np.exp(-selection_threshold(policy.target_messages)))
    for segment, following in zip(segments, segments[1:], strict=False):
        gap = decisions[following.messages[0].id]
        assert gap.reason is segment.boundary_reason
        if segment.boundary_reason is BoundaryReason.TOPIC_SHIFT:
            assert gap.score >= threshold  # cleared the threshold on its own
        elif segment.boundary_reason is BoundaryReason.MAX_SIZE:
            assert gap.score < threshold and len(segment.messages) + len(following.messages) > 5
        else:
            assert segment.boundary_reason is BoundaryReason.TIME_GAP and gap.score == 1.0
    reasons = [s.boundary_reason for s in segments]
    assert {BoundaryReason.TOPIC_SHIFT, BoundaryReason.MAX_SIZE, BoundaryReason.TIME_GAP} <= set(reasons)
    assert reasons[-1] is BoundaryReason.END_OF_SESSION
    assert [s.messages[0].id for s in segments if s.messages[0].id in {"m4", "m8", "m12"}] == ["m4", "m8", "m12"]


def test_time_gaps_stay_hard_boundaries_even_inside_one_topic_and_below_the_minimum(
    embedder: SentenceTransformerEmbedder,
) -> None:
    turns = [("ann", "my cat rex sleeps all day"), ("bob", "my cat sleeps all day too"), ("ann", "cats sleep a lot")]
    messages = messages_from(turns, [0, 1, 45])
    policy = SegmentationPolicy(min_messages=2, max_messages=12, time_gap=timedelta(minutes=30))
    for vectors in (vectors_for(embedder, messages), None):
        segments = split_messages(messages, policy=policy, vectors=vectors)
        assert [s.message_ids for s in segments] == [("m0", "m1"), ("m2",)]
        assert segments[0].boundary_reason is BoundaryReason.TIME_GAP


def test_the_older_window_rule_stays_selectable() -> None:
    messages = messages_from([("ann", f"message {i}") for i in range(6)])
    vectors = np.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
    policy = SegmentationPolicy(method="window", min_messages=2, max_messages=12)
    segments = split_messages(messages, policy=policy, vectors=vectors)
    assert [s.message_ids for s in segments] == [("m0", "m1", "m2"), ("m3", "m4", "m5")]
    assert segments[0].boundary_reason is BoundaryReason.TOPIC_SHIFT
    # no cut that would leave a piece under the minimum, as before
    short = split_messages(messages[:5], policy=replace(policy, min_messages=3), vectors=vectors[:5])
    assert [len(s.messages) for s in short] == [5]


# -- the command -------------------------------------------------------------------------------------


def write_jsonl(path: Path) -> Path:
    lines = [
        {
            "group_id": "g",
            "session_id": "s1",
            "id": m.id,
            "content": m.content,
            "producer_id": m.producer_id,
            "timestamp": m.timestamp.isoformat(),
        }
        for m in messages_from(DIALOGUE, [*range(6), *(90 + m for m in range(6))])
    ]
    lines += [
        {
            "group_id": "g",
            "session_id": "s2",
            "id": f"x{i}",
            "content": text,
            "producer_id": speaker,
            "timestamp": (T0 + timedelta(days=1, minutes=i)).isoformat(),
        }
        for i, (speaker, text) in enumerate(DIALOGUE[:3])
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def run_segment(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return epimem("segment", *args, timeout=300, EPIMEM_DATA_DIR=str(tmp_path / "data"))


@pytest.mark.slow  # its own process loads the model
def test_segment_command_prints_one_json_line_per_gap_and_stores_nothing(tmp_path: Path) -> None:
    result = run_segment(tmp_path, str(write_jsonl(tmp_path / "messages.jsonl")), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["session_id"], r["after_id"], r["before_id"]) for r in rows] == [
        *(("s1", f"m{i}", f"m{i + 1}") for i in range(11)),
        ("s2", "x0", "x1"),
        ("s2", "x1", "x2"),
    ]
    assert all(
        set(r) == {"group_id", "session_id", "after_id", "before_id", "score", "boundary", "reason"} for r in rows
    )
    assert all(0 <= r["score"] <= 1 and r["boundary"] == (r["reason"] is not None) for r in rows)
    gap = rows[5]  # m5 -> m6: 85 minutes of silence
    assert gap["boundary"] and gap["reason"] == "time_gap" and gap["score"] == 1.0
    assert rows[7]["boundary"] and rows[7]["reason"] == "topic_shift"  # m7 -> m8: "what do you do for work"
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_the_documented_example_runs_and_finds_the_shift_and_the_time_gap(tmp_path: Path) -> None:
    found = blocks(__file__, "bash", DOC)
    assert found, f"no tested bash block in {DOC}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "EPIMEM_DATA_DIR": str(tmp_path / "data")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", found[0]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 7
    assert [(r["before_id"], r["reason"]) for r in rows if r["boundary"]] == [("m5", "topic_shift"), ("m8", "time_gap")]
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_segment_command_names_a_bad_line_and_a_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"group_id": "g", "session_id": "s", "id": "a", "content": "hi"}\n{"group_id": "g"}\n')
    result = run_segment(tmp_path, str(bad), "--json")
    assert result.returncode == 2 and "line 2" in result.stderr and "Traceback" not in result.stderr
    missing = run_segment(tmp_path, str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
