"""BEAM user-assistant chats as benchmark samples (the protocol of ../shared/data/README.md).

Each chat is one group, each batch one session; message id = ``str(id)``, role and producer = the role;
messages are timed from their batch's anchor (the batch's ``time_anchor``, else its first message's, else
2024-01-01 09:00 UTC for the first batch), two minutes apart, and a batch without an anchor starts a day after
the last message before it. Messages go in whole (epimem accepts up to ``max_message_chars``). Questions with
evidence (abstention has none) are kept, their ``source_chat_ids`` flattened; categories are numbered 11-19
(``CATEGORY_NAMES``) beside LoCoMo's 1-5. The baselines see each message as "[date] role: text".

    from beam import load_beam
    samples = load_beam(BEAM / "100K")          # ten chats of ~190 messages
"""

from __future__ import annotations

import ast
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from locomo import Sample, Turn

from memory.ingest.importers import LocomoSample, Question
from memory.models import Message, Role
from tests.benchmarks._common import LOCOMO
from tests.benchmarks.benchmark_data import ROOT, data_folder

BEAM = LOCOMO.parent / "beam-dev"
# A short user-assistant chat of the project's own, in BEAM's format: what runs on a clone with nothing beside it.
SHIPPED_CHAT = ROOT / "examples" / "assistant-chat"
START = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
SPACING = timedelta(minutes=2)
BATCH_GAP = timedelta(days=1)
CATEGORY_NAMES = {
    11: "contradiction",
    12: "event ordering",
    13: "information extraction",
    14: "instruction following",
    15: "knowledge update",
    16: "multi-session",
    17: "preference",
    18: "summarization",
    19: "temporal",
}
_CATEGORY_KEYS = {
    "contradiction_resolution": 11,
    "event_ordering": 12,
    "information_extraction": 13,
    "instruction_following": 14,
    "knowledge_update": 15,
    "multi_session_reasoning": 16,
    "preference_following": 17,
    "summarization": 18,
    "temporal_reasoning": 19,
}


def chat_folders(root: Path = BEAM, sizes: tuple[str, ...] = ("100K",)) -> list[Path]:
    """The chat folders of the given sizes, in numeric order."""
    folders = [path for size in sizes for path in (root / size).iterdir() if (path / "chat.json").exists()]
    return sorted(folders, key=lambda p: (p.parent.name, int(p.name) if p.name.isdigit() else p.name))


def _anchor(batch: dict[str, Any]) -> datetime | None:
    first = next((m for turn in batch.get("turns", []) for m in turn), {})
    text = batch.get("time_anchor") or first.get("time_anchor")
    if not text:
        return None
    return datetime.strptime(str(text), "%B-%d-%Y").replace(hour=9, tzinfo=UTC)


def _evidence(raw: Any) -> tuple[str, ...]:
    value = ast.literal_eval(raw) if isinstance(raw, str) else raw
    ids: list[Any] = []
    for part in value.values() if isinstance(value, dict) else [value]:
        ids.extend(part if isinstance(part, list) else [part])
    return tuple(dict.fromkeys(str(i) for i in ids))


# What the question's rubric says an answer should state ("LLM response should state: March 29"), by group and
# question, for the chats loaded: the facts a context must carry, not only the ids it cites.
STATED: dict[str, dict[str, tuple[str, ...]]] = {}
_FILLER = frozenset(
    "a an and are as at be by did do does for from how i in is it its me my of on or should that the this to was "
    "were what when which with you your".split()
)


def _stated(item: dict[str, Any]) -> tuple[str, ...]:
    rubric = [str(line) for line in item.get("rubric", [])]
    return tuple(line.split(":", 1)[1].strip() for line in rubric if "should state" in line and ":" in line)


def fact_words(text: str) -> set[str]:
    """The words that carry a fact: lowercase, two characters or more, without filler words."""
    return {word for word in re.findall(r"\w+", text.lower()) if len(word) > 1 and word not in _FILLER}


def fact_share(facts: tuple[str, ...], text: str) -> float:
    """Per fact, the share of its words found in ``text``; their mean."""
    found = fact_words(text)
    shares = [len(words & found) / len(words) for words in map(fact_words, facts) if words]
    return sum(shares) / len(shares) if shares else 0.0


def load_chat(folder: Path) -> Sample:
    """One chat folder as a sample (group id ``beam-<size>-<n>``)."""
    batches = json.loads((folder / "chat.json").read_text(encoding="utf-8"))
    sessions: dict[str, list[Message]] = {}
    turns: list[Turn] = []
    clock = START - BATCH_GAP
    for batch in sorted(batches, key=lambda b: int(b["batch_number"])):
        anchor = _anchor(batch)
        clock = anchor if anchor is not None else clock + BATCH_GAP
        messages = []
        for raw in (m for turn in batch["turns"] for m in turn):
            if not str(raw.get("content", "")).strip():
                continue
            role = Role.ASSISTANT if raw["role"] == "assistant" else Role.USER
            message = Message(
                id=str(raw["id"]), role=role, content=raw["content"], timestamp=clock, producer_id=role.value
            )
            messages.append(message)
            turns.append(Turn(message.id, f"[{clock:%Y-%m-%d}] {role.value}: {message.content}"))
            clock += SPACING
        sessions[f"batch_{batch['batch_number']}"] = messages
    probing = json.loads((folder / "probing_questions" / "probing_questions.json").read_text(encoding="utf-8"))
    questions = [
        Question(item["question"], str(item.get("answer", "")), _evidence(item["source_chat_ids"]), number)
        for key, number in _CATEGORY_KEYS.items()
        for item in probing.get(key, [])
        if item.get("source_chat_ids")
    ]
    sample_id = f"beam-{folder.parent.name}-{folder.name}"
    STATED[sample_id] = {
        item["question"]: facts
        for key in _CATEGORY_KEYS
        for item in probing.get(key, [])
        if item.get("source_chat_ids") and (facts := _stated(item))
    }
    return Sample(LocomoSample(sample_id, ("user", "assistant"), sessions, questions), turns)


def assistant_chat_folder() -> Path:
    """BEAM's first 100K chat where the benchmark data lies beside the repository, else the shipped example."""
    folder = data_folder()
    chat = folder / "beam-dev" / "100K" / "1" if folder is not None else None
    return chat if chat is not None and (chat / "chat.json").exists() else SHIPPED_CHAT


def load_beam(root: Path = BEAM, sizes: tuple[str, ...] = ("100K",)) -> list[Sample]:
    return [load_chat(folder) for folder in chat_folders(root, sizes)]
