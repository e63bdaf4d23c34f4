"""Episode generation logic: prompts, sanitising, timestamp resolution, validation, batch isolation,
and the offline generator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.episodes.generation import (
    GenerationJob,
    GeneratorStats,
    OfflineEpisodeGenerator,
    batch_generate_episodes,
    episode_id_for,
    validate_episode,
)
from memory.episodes.llm_generator import MAX_CONTENT_CHARS, MAX_TITLE_CHARS, resolve_timestamp, sanitise_episode
from memory.episodes.offline import main_subject, offline_title
from memory.episodes.prompts import PROMPT_VERSION, episode_messages, format_conversation
from memory.errors import StoreUnavailableError
from memory.llm.client import LLMError, parse_json_object
from memory.models import BoundaryReason, Episode, GenerationMethod, Message, Segment

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
DAY = timedelta(days=1)


def seg(*texts: str, start: datetime = T0, reason: BoundaryReason = BoundaryReason.FLUSH) -> Segment:
    speakers = ["Caroline", "Melanie"]
    return Segment(
        messages=tuple(
            Message(
                id=f"m{i}",
                content=text,
                producer_id=speakers[i % 2],
                timestamp=start + timedelta(minutes=i),
                metadata={"image_caption": "a photo of a lake at sunset"} if "[img]" in text else {},
            )
            for i, text in enumerate(texts)
        ),
        boundary_reason=reason,
    )


SUPPORT = seg(
    "I went to the LGBTQ support group yesterday, it was so powerful.",
    "Wow, the support group sounds amazing! Did you meet people at Lake Tahoe Pride?",
    "Yes, the support group organised a trip to Lake Tahoe last week. [img]",
)


# -- prompts ---------------------------------------------------------------------------------------


def test_format_conversation_has_speakers_absolute_utc_times_and_captions() -> None:
    text = format_conversation(SUPPORT.messages)
    lines = text.splitlines()
    assert lines[0] == (
        "[Mon 2023-05-08 13:56 UTC] Caroline: I went to the LGBTQ support group yesterday, it was so powerful."
    )
    assert lines[2].endswith("[shared an image: a photo of a lake at sunset]")
    numbered = format_conversation(SUPPORT.messages, numbered=True)
    assert numbered.splitlines()[1].startswith("2. [Mon 2023-05-08 13:57 UTC] Melanie: ")


def test_episode_prompt_carries_the_boundary_reason_and_the_required_json() -> None:
    system, user = episode_messages(SUPPORT.messages, BoundaryReason.TIME_GAP)
    assert system["role"] == "system" and "JSON" in system["content"]
    assert "long pause" in user["content"]
    for key in ('"title"', '"content"', '"timestamp"', "third-person", "absolute dates"):
        assert key in user["content"]
    assert "from Mon 2023-05-08 13:56 UTC to Mon 2023-05-08 13:58 UTC" in user["content"]
    assert PROMPT_VERSION and "Topic" not in user["content"]
    _, with_topic = episode_messages(SUPPORT.messages, BoundaryReason.LLM, topic="support group trip")
    assert "Topic, as the segmenter saw it: support group trip." in with_topic["content"]


# -- sanitising ------------------------------------------------------------------------------------


def test_sanitise_strips_bounds_and_repairs() -> None:
    clean = sanitise_episode(
        {"title": '  "Caroline\n at the   group" ', "content": "  line one  \n\n  line two ", "timestamp": None},
        SUPPORT,
        margin=30 * DAY,
    )
    assert (clean.title, clean.content, clean.timestamp, clean.repairs) == (
        "Caroline at the group",
        "line one\nline two",
        T0,
        (),
    )
    long = sanitise_episode({"title": "word " * 100, "content": "x " * MAX_CONTENT_CHARS}, SUPPORT, margin=DAY)
    assert len(long.title) <= MAX_TITLE_CHARS and len(long.content) <= MAX_CONTENT_CHARS
    assert set(long.repairs) == {"title_length", "content_length"}
    as_list = sanitise_episode({"title": "t", "content": ["a", "b"]}, SUPPORT, margin=DAY)
    assert as_list.content == "a\nb" and as_list.repairs == ("content_list",)


@pytest.mark.parametrize("content", [None, "", "   ", 42, {"text": "x"}, [1, 2]])
def test_sanitise_rejects_missing_or_non_text_content(content: object) -> None:
    with pytest.raises(LLMError) as raised:
        sanitise_episode({"title": "t", "content": content}, SUPPORT, margin=DAY)
    assert raised.value.kind == "schema"


def test_timestamp_resolution_order() -> None:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    messages = SUPPORT.messages
    assert resolve_timestamp(T0 - DAY, messages, margin=2 * DAY, now=now) == T0 - DAY  # plausible LLM value
    assert resolve_timestamp(T0 - 3 * DAY, messages, margin=2 * DAY, now=now) == T0  # too early -> earliest
    assert resolve_timestamp(now + DAY, messages, margin=2 * DAY, now=now) == T0  # future -> earliest
    assert resolve_timestamp(None, messages, margin=DAY, now=now) == T0
    assert resolve_timestamp(None, (), margin=DAY, now=now) == now  # nothing else -> now
    naive = sanitise_episode({"content": "c", "timestamp": "2023-05-08 10:00"}, SUPPORT, margin=DAY)
    assert naive.timestamp == datetime(2023, 5, 8, 10, 0, tzinfo=UTC)  # naive = UTC
    offset = sanitise_episode({"content": "c", "timestamp": "2023-05-08T15:00:00+02:00"}, SUPPORT, margin=DAY)
    assert offset.timestamp == datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


def test_json_parsing_tolerates_fences_and_rejects_non_objects() -> None:
    assert parse_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_object('Here you go: {"a": {"b": 2}} Enjoy!') == {"a": {"b": 2}}
    for bad in (None, "", "[1, 2]", "{'a': 1}", "no json here"):
        with pytest.raises(LLMError) as raised:
            parse_json_object(bad)
        assert raised.value.kind == "invalid_json"


# -- validation and batch ------------------------------------------------------------------------------


def offline(segment: Segment, episode_id: str = "e1") -> Episode:
    return OfflineEpisodeGenerator().generate(segment, group_id="g", session_id="s", episode_id=episode_id)


def test_validate_episode_finds_each_inconsistency() -> None:
    good = offline(SUPPORT)
    assert validate_episode(good, SUPPORT, episode_id="e1", group_id="g", session_id="s") == []
    broken = {
        "uuid": "other",
        "source_message_ids": ("m0", "m1"),
        "message_count": 7,
        "title": " ",
        "content": "\n",
        "timestamp": datetime.now(UTC) + 10 * DAY,
        "boundary_reason": BoundaryReason.TIME_GAP,
    }
    for field, value in broken.items():
        problems = validate_episode(good.model_copy(update={field: value}), SUPPORT, episode_id="e1")
        assert problems, field
    early = good.model_copy(update={"timestamp": T0 - 40 * DAY})
    assert validate_episode(early, SUPPORT, timestamp_margin=30 * DAY)
    assert validate_episode(early, SUPPORT, timestamp_margin=None) == []
    assert validate_episode(good, SUPPORT, group_id="h")


class FlakyGenerator:
    """A deterministic stand-in for logic tests: fails one way or another on chosen messages."""

    def __init__(self) -> None:
        self.inner = OfflineEpisodeGenerator()

    def generate(self, segment: Segment, *, group_id: str, session_id: str, episode_id: str) -> Episode:
        text = segment.messages[0].content
        if text == "raise":
            raise StoreUnavailableError("backend down")
        episode = self.inner.generate(segment, group_id=group_id, session_id=session_id, episode_id=episode_id)
        if text == "inconsistent":
            return episode.model_copy(update={"source_message_ids": ("someone-else",)})
        return episode

    def stats(self) -> GeneratorStats:
        return self.inner.stats()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_batch_isolates_each_segment(concurrency: int) -> None:
    texts = ["fine one", "raise", "fine two", "inconsistent", "fine three"]
    segments = [seg(text, start=T0 + i * DAY) for i, text in enumerate(texts)]
    jobs = [GenerationJob(s, "g", f"s{i}", episode_id_for("g", f"s{i}", s.message_ids)) for i, s in enumerate(segments)]
    episodes = batch_generate_episodes(FlakyGenerator(), jobs, concurrency=concurrency)
    assert [e.generation for e in episodes] == [
        GenerationMethod.OFFLINE,
        GenerationMethod.FALLBACK,
        GenerationMethod.OFFLINE,
        GenerationMethod.FALLBACK,
        GenerationMethod.OFFLINE,
    ]
    for episode, job in zip(episodes, jobs, strict=True):
        assert (
            validate_episode(episode, job.segment, episode_id=job.episode_id, group_id="g", session_id=job.session_id)
            == []
        )
    assert "fine three" in episodes[4].content
    assert batch_generate_episodes(FlakyGenerator(), [], concurrency=concurrency) == []


# -- offline generator ---------------------------------------------------------------------------------


def test_offline_episode_is_deterministic_and_keeps_who_said_what_and_when() -> None:
    first, second = offline(SUPPORT), offline(SUPPORT)
    assert first.model_dump(exclude={"created_at"}) == second.model_dump(exclude={"created_at"})
    assert first.generation is GenerationMethod.OFFLINE and first.timestamp == T0
    assert first.content.splitlines()[0] == "On 8 May 2023, 13:56 UTC:"
    assert "Caroline said: I went to the LGBTQ support group yesterday (7 May 2023)" in first.content
    assert "last week (week of 1 May 2023)" in first.content
    assert "[shared an image: a photo of a lake at sunset]" in first.content
    assert OfflineEpisodeGenerator().stats().model == "offline"


def test_offline_title_names_the_speakers_the_date_and_the_main_subject() -> None:
    # Names and repeated word pairs outrank single words; a name inside a longer one is not repeated.
    assert main_subject(SUPPORT) == ["Lake Tahoe", "support group", "LGBTQ", "powerful"]
    assert offline_title(SUPPORT) == "Caroline and Melanie, 8 May 2023: Lake Tahoe, support group, LGBTQ, powerful"
    chat = seg("Hey Mel! Last Friday I adopted a puppy.", "Hey Caroline, a puppy! What is the puppy called?")
    assert main_subject(chat)[0] == "puppy" and "Hey Mel" not in main_subject(chat)
    assert "Last Friday" not in offline_title(chat)
