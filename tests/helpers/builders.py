"""Messages for the tests, in one shape: ids ``{prefix}{i}``, speakers taking turns, times one gap apart.
What the messages say is the test's own (a format string, a function of the index, or scripted lines)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the subprocesses that import message() load no service code
    from api.facade import Epimem
    from epimem_client import EpimemClient

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SPEAKERS = ("Caroline", "Melanie")
REX = "Turn {i}: Caroline told Melanie about hiking at Lake Tahoe with her dog Rex."


def messages(
    n: int,
    *,
    prefix: str = "m",
    start: datetime = T0,
    gap: timedelta = MINUTE,
    text: str | Sequence[str] | Callable[[int], str] = REX,
    topics: Sequence[str] = (),
    speakers: Sequence[str] = SPEAKERS,
    **fields: Any,
) -> list[dict[str, Any]]:
    """``n`` messages ``{prefix}0``, ``{prefix}1``, … one ``gap`` apart from ``start``, the ``speakers`` taking
    turns (no speaker when empty). ``text`` is one text per message, a function of the index, or a format string of
    ``i`` and ``topic``: with ``topics``, the first part of the messages is about the first topic, the next part
    about the second, and so on. ``fields`` are added to every message."""
    out = []
    for i in range(n):
        if isinstance(text, str):
            content = text.format(i=i, topic=topics[i * len(topics) // n] if topics else "")
        else:
            content = text(i) if callable(text) else text[i]
        message: dict[str, Any] = {"id": f"{prefix}{i}", "content": content}
        if speakers:
            message["producer_id"] = speakers[i % len(speakers)]
        message["timestamp"] = (start + gap * i).isoformat()
        out.append(message | fields)
    return out


def turns(
    lines: Sequence[tuple[str, str]],
    *,
    prefix: str = "m",
    start: datetime = T0,
    gap: timedelta = MINUTE,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Scripted ``(speaker, text)`` lines as messages ``{prefix}0``, ``{prefix}1``, … one ``gap`` apart, each
    speaker its ``producer_id``."""
    return [
        {"id": f"{prefix}{i}", "content": text, "producer_id": who, "timestamp": (start + gap * i).isoformat()} | fields
        for i, (who, text) in enumerate(lines)
    ]


# -- numbered messages: the same content for the same index (a retry is a duplicate) -------------------------------

NOTES_T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
NOTE_TOPICS = ["hiking at Lake Tahoe", "the new espresso machine", "the quarterly budget review", "Rex the dog"]


def message(index: int, *, session: str = "s", variant: str = "") -> dict[str, Any]:
    """Message ``index`` always has the same content (a retry is a duplicate), unless ``variant``."""
    return {
        "id": f"{session}-m{index:04d}",
        "content": f"Note {index} about {NOTE_TOPICS[index // 7 % len(NOTE_TOPICS)]}{variant}.",
        "producer_id": ["ana", "ben"][index % 2],
        "timestamp": (NOTES_T0 + timedelta(minutes=index)).isoformat(),
    }


# -- the lifecycle tests' conversations (deletion, export, erasure, summaries) --------------------------------------

REFERENCE = datetime(2023, 6, 1, tzinfo=UTC)
LIFE = [
    "I went hiking at Lake Tahoe with my dog Rex and we saw a bald eagle.",
    "The pottery class was fun, I made a blue vase for my mother.",
    "My sister adopted a kitten named Luna from the animal shelter.",
    "We are planning a road trip to the Grand Canyon next summer.",
]


def chat(prefix: str, count: int, *, start: datetime, topic: int = 0, marker: str = "") -> list[dict[str, Any]]:
    """``count`` messages ``{prefix}-{i}`` one minute apart, two per topic; the first one carries ``marker`` when
    given."""

    def text(i: int) -> str:
        line = f"{LIFE[(topic + i // 2) % len(LIFE)]} ({prefix} {i})"
        return f"{line} The code word is {marker}." if marker and i == 0 else line

    return messages(count, prefix=f"{prefix}-", start=start, text=text)


def two_episode_session(service: Epimem, group_id: str, session_id: str, *, day: int, marker: str = "") -> None:
    """Two episodes (a day apart: a time gap) of two messages each."""
    start = T0 + timedelta(days=day)
    first = chat(f"{session_id}-a", 2, start=start, topic=day, marker=marker)
    second = chat(f"{session_id}-b", 2, start=start + timedelta(days=1), topic=day + 1)
    service.add_messages(group_id, session_id, first + second)
    service.flush(group_id, session_id)


# -- the integrations' conversation (LangChain, LlamaIndex) -----------------------------------------------------------

REX_LINES = [
    ("Caroline", "I adopted a golden retriever called Rex last weekend."),
    ("Melanie", "How is Rex settling in at home?"),
    ("Caroline", "Rex loves the park by the lake, we walk there every morning."),
]


def seed_rex_chat(memory: EpimemClient | Epimem, group: str) -> str:
    """Three turns about Rex in session ``chat-1`` of ``group`` and one message in another group, flushed; the uuid
    of the Rex episode."""
    memory.add_messages(group, "chat-1", turns(REX_LINES))
    other = [{"id": "o1", "content": "Melanie paints sunsets with watercolours.", "timestamp": T0.isoformat()}]
    memory.add_messages("other-group", "chat-9", other)
    memory.flush("other-group", "chat-9")
    return memory.flush(group, "chat-1")[0].uuid
