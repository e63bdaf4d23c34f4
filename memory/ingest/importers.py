"""Readers for conversation files: LoCoMo samples, REALTALK chats and JSON Lines of messages.

Both yield (group_id, session_id, [Message, ...]) batches in event-time order, so any surface
(facade, CLI, benchmarks, notebooks) ingests them the same way.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory.errors import InvalidInputError
from memory.models import Message, Role
from memory.timeutil import parse_timestamp

# LoCoMo gives one date per session; turns are spaced this far apart so they keep their order.
LOCOMO_TURN_SPACING = timedelta(seconds=30)
_DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int


@dataclass
class LocomoSample:
    sample_id: str
    speakers: tuple[str, str]
    sessions: dict[str, list[Message]] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return [message for messages in self.sessions.values() for message in messages]


def normalise_evidence(raw: list[Any]) -> tuple[str, ...]:
    """'D8:6; D9:17' -> ('D8:6', 'D9:17'); 'D30:05' -> 'D30:5'. Unreadable entries are skipped."""
    found: list[str] = []
    for item in raw:
        for session, turn in _DIA_ID.findall(str(item)):
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def read_locomo(path: str | Path) -> list[LocomoSample]:
    """Each sample is one group; each LoCoMo session one session; message id = dia_id."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidInputError(f"cannot read LoCoMo file {path}: {error}") from error
    if not isinstance(data, list):
        raise InvalidInputError("a LoCoMo file holds a JSON list of samples")
    return [_locomo_sample(item) for item in data]


def _locomo_sample(item: dict[str, Any]) -> LocomoSample:
    conversation = item["conversation"]
    sample = LocomoSample(
        sample_id=str(item["sample_id"]),
        speakers=(str(conversation.get("speaker_a", "")), str(conversation.get("speaker_b", ""))),
    )
    session_numbers = sorted(
        int(key.split("_")[1]) for key, value in conversation.items() if re.fullmatch(r"session_\d+", key) and value
    )
    for number in session_numbers:
        turns = conversation[f"session_{number}"]
        start = parse_timestamp(conversation[f"session_{number}_date_time"])
        speakers = sample.speakers
        messages = []
        for index, turn in enumerate(turns):
            speaker = str(turn["speaker"])
            other = speakers[1] if speaker == speakers[0] else speakers[0]
            metadata: dict[str, Any] = {}
            if turn.get("blip_caption"):
                metadata["image_caption"] = turn["blip_caption"]
            messages.append(
                Message(
                    id=str(turn["dia_id"]),
                    role=Role.USER,
                    content=str(turn.get("text") or "").strip() or f"[shared an image: {turn.get('blip_caption', '')}]",
                    timestamp=start + LOCOMO_TURN_SPACING * index,
                    producer_id=speaker,
                    produced_for_id=other,
                    metadata=metadata,
                )
            )
        sample.sessions[f"session_{number}"] = messages
    for qa in item.get("qa", []):
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        sample.questions.append(
            Question(
                question=str(qa["question"]),
                answer=str(answer),
                evidence=normalise_evidence(qa.get("evidence", [])),
                category=int(qa["category"]),
            )
        )
    return sample


def read_jsonl(path: str | Path) -> Iterator[tuple[str, str, list[Message]]]:
    """JSON Lines, one message per line, each with ``group_id``, ``session_id`` and the Message
    fields. Yields one batch per (group, session) in file order; bad lines raise with their number."""
    batches: dict[tuple[str, str], list[Message]] = defaultdict(list)
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                group_id = str(record.pop("group_id"))
                session_id = str(record.pop("session_id"))
                batches[(group_id, session_id)].append(Message.model_validate(record))
            except (json.JSONDecodeError, KeyError, ValueError, AttributeError) as error:
                raise InvalidInputError(f"line {number} of {path}: {error}") from error
    for (group_id, session_id), messages in batches.items():
        yield group_id, session_id, messages


# -- REALTALK ----------------------------------------------------------------------------------------

_REALTALK_TIME = "%d.%m.%Y, %H:%M:%S"  # "29.12.2023, 22:42:04", day first
_EVIDENCE_RANGE = re.compile(r"D:?(\d+):(\d+)\s*-\s*(?:D:?(\d+):)?(\d+)")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")


def normalise_realtalk_evidence(raw: list[Any], known: set[str]) -> tuple[str, ...]:
    """REALTALK evidence as ../shared/data/README.md normalises it: 'D3:4-D3:6' and 'D3:4-6' expand
    to every turn of the range; 'D3:9-D4:2' (across prefixes) counts only its two ends; every other
    'D<s>:<t>' (also 'D:<s>:<t>') is one id; ids lose leading zeros; ids not in ``known`` are dropped."""
    found: list[str] = []
    for item in raw:
        text = str(item)
        ids: list[tuple[int, int]] = []
        for start_session, first, end_session, last in _EVIDENCE_RANGE.findall(text):
            if end_session and int(end_session) != int(start_session):
                ids += [(int(start_session), int(first)), (int(end_session), int(last))]
            else:
                ids += [(int(start_session), turn) for turn in range(int(first), int(last) + 1)]
        ids += [(int(s), int(t)) for s, t in _EVIDENCE_ID.findall(_EVIDENCE_RANGE.sub(" ", text))]
        for session, turn in ids:
            dia_id = f"D{session}:{turn}"
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def read_realtalk(path: str | Path) -> LocomoSample:
    """One REALTALK chat file as one group: one session per ``session_N``, message id = dia_id (an
    opaque id), each message at its own ``date_time``, speaker ids as the turns give them."""
    try:
        item = json.loads(Path(path).read_text(encoding="utf-8"))
        names = item["name"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise InvalidInputError(f"cannot read REALTALK file {path}: {error}") from error
    sample = LocomoSample(
        sample_id=Path(path).stem, speakers=(str(names.get("speaker_1", "")), str(names.get("speaker_2", "")))
    )
    numbers = sorted(int(k.split("_")[1]) for k, value in item.items() if re.fullmatch(r"session_\d+", k) and value)
    for number in numbers:
        messages = []
        for turn in item[f"session_{number}"]:
            speaker = str(turn["speaker"])
            other = next((s for s in sample.speakers if s != speaker), "")
            try:
                timestamp = datetime.strptime(str(turn["date_time"]), _REALTALK_TIME).replace(tzinfo=UTC)
            except ValueError as error:
                raise InvalidInputError(f"{path}: unreadable date_time in {turn.get('dia_id')}: {error}") from error
            messages.append(
                Message(
                    id=str(turn["dia_id"]),
                    role=Role.USER,
                    content=str(turn.get("clean_text") or "").strip() or "[shared an image]",
                    timestamp=timestamp,
                    producer_id=speaker,
                    produced_for_id=other,
                )
            )
        sample.sessions[f"session_{number}"] = messages
    known = {message.id for message in sample.messages}
    for qa in item.get("qa", []):
        sample.questions.append(
            Question(
                question=str(qa["question"]),
                answer=str(qa.get("answer", "")),
                evidence=normalise_realtalk_evidence(qa.get("evidence", []), known),
                category=int(qa["category"]),
            )
        )
    return sample
