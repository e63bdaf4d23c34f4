"""Every prompt epimem sends to an LLM, in one place and versioned.

Bump PROMPT_VERSION whenever a prompt's wording or its expected JSON changes: it is recorded
in each LLM episode's metadata, so episodes made by different prompts can be told apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory.models import BoundaryReason, Message
from memory.text import clip, image_note
from memory.timeutil import to_utc

PROMPT_VERSION = "2026-12-01.1"  # image notes read "shared an image", as everywhere else

# Long messages are cut in prompts (the messages themselves are stored verbatim).
EPISODE_MESSAGE_CHARS = 4000
SEGMENTER_MESSAGE_CHARS = 400
CAPTION_CHARS = 300

BOUNDARY_DESCRIPTIONS: dict[BoundaryReason, str] = {
    BoundaryReason.TIME_GAP: "a long pause in the conversation followed this stretch",
    BoundaryReason.MAX_SIZE: "the stretch reached the maximum episode size; the conversation may continue",
    BoundaryReason.TOPIC_SHIFT: "the conversation moved on to another topic after this stretch",
    BoundaryReason.FLUSH: "the application asked for everything said so far to be remembered",
    BoundaryReason.END_OF_SESSION: "the conversation session ended",
    BoundaryReason.LLM: "a segmenter judged this stretch to be one coherent topic or event",
}


def format_timestamp(value: datetime) -> str:
    """Absolute UTC time with the weekday, so relative dates can be resolved: 'Mon 2023-05-08 13:56 UTC'."""
    return f"{to_utc(value):%a %Y-%m-%d %H:%M} UTC"


def format_message(message: Message, *, limit: int = EPISODE_MESSAGE_CHARS) -> str:
    target = f" (to {message.produced_for_id})" if message.produced_for_id else ""
    shared = image_note(message, limit=CAPTION_CHARS)
    return f"[{format_timestamp(message.timestamp)}] {message.speaker}{target}: {clip(message.content, limit)}{shared}"


def format_conversation(
    messages: Sequence[Message], *, numbered: bool = False, limit: int = EPISODE_MESSAGE_CHARS
) -> str:
    """One line per message: absolute UTC timestamp, speaker (and addressee), text, image caption.

    ``numbered`` prefixes 1-based indices (the segmenter answers with them).
    """
    lines = [format_message(message, limit=limit) for message in messages]
    if numbered:
        lines = [f"{index}. {line}" for index, line in enumerate(lines, start=1)]
    return "\n".join(lines)


EPISODE_SYSTEM = """You turn a stretch of conversation into one episodic memory: a faithful, \
third-person account that someone could read months later and know exactly what happened.
Answer with a single JSON object and nothing else."""

EPISODE_USER = """Conversation ({count} messages, from {start} to {end}):
{conversation}

Why this stretch ends here: {boundary}.{topic}

Write the episode as JSON with these keys:
- "title": a short, specific headline naming the people and the main subject (at most 12 words).
- "content": a third-person narrative of what happened, in the order it happened. Name every \
person by name (never "the user" or "I"). Keep every concrete detail: names, places, numbers, \
dates, plans, decisions, preferences, feelings, and things shown in shared images. Replace \
relative dates ("yesterday", "last week", "next month") with absolute dates computed from the \
timestamp of the message that used them (e.g. "yesterday" said on 2023-05-08 is 7 May 2023). \
Do not invent anything that was not said.
- "timestamp" (optional): when the episode happened, as ISO 8601 in UTC (e.g. \
"2023-05-08T13:56:00Z"); omit it if unsure.
"""


def episode_messages(
    messages: Sequence[Message], boundary_reason: BoundaryReason, *, topic: str | None = None
) -> list[dict[str, str]]:
    """Chat messages (system + user) asking for one episode; ``topic`` is the segmenter's, if any."""
    times = [message.timestamp for message in messages]
    user = EPISODE_USER.format(
        count=len(messages),
        start=format_timestamp(min(times)),
        end=format_timestamp(max(times)),
        conversation=format_conversation(messages),
        boundary=BOUNDARY_DESCRIPTIONS.get(boundary_reason, boundary_reason.value),
        topic=f"\nTopic, as the segmenter saw it: {topic}." if topic else "",
    )
    return [{"role": "system", "content": EPISODE_SYSTEM}, {"role": "user", "content": user}]


SEGMENTER_SYSTEM = """You split a conversation into episodes: consecutive stretches that each \
cover one topic or event. Answer with a single JSON object and nothing else."""

SEGMENTER_USER = """Numbered messages (1 to {count}):
{conversation}

Group the messages into episodes. Rules:
- every message number from 1 to {count} appears in exactly one episode;
- each episode is a consecutive run of numbers, and episodes are in order;
- start a new episode when the topic or event changes, or after a long pause;
- an episode has at most {max_messages} messages; prefer episodes of at least {min_messages} messages.

Answer as JSON: {{"episodes": [{{"indices": [1, 2, 3], "topic": "a few words"}}, ...]}}
"""


def segmenter_messages(messages: Sequence[Message], *, min_messages: int, max_messages: int) -> list[dict[str, str]]:
    """Chat messages (system + user) asking for segment boundaries, as 1-based indices."""
    user = SEGMENTER_USER.format(
        count=len(messages),
        conversation=format_conversation(messages, numbered=True, limit=SEGMENTER_MESSAGE_CHARS),
        min_messages=min_messages,
        max_messages=max_messages,
    )
    return [{"role": "system", "content": SEGMENTER_SYSTEM}, {"role": "user", "content": user}]
