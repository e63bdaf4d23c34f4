"""The conversations shipped with epimem (examples/conversations.json) are consistent: the two speakers take
turns, nobody addresses themself by name ("Priya said: Priya, I finished the marathon"), and a question
about one person is answered by that person's own first-person words."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers.paths import ROOT

SHIPPED = ROOT / "examples" / "conversations.json"
FIRST_PERSON = re.compile(r"\b(I|I'm|I've|my|me|we|our)\b")


def _samples() -> list[dict[str, Any]]:
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def _sessions(sample: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    conversation = sample["conversation"]
    return {key: value for key, value in conversation.items() if re.fullmatch(r"session_\d+", key)}


def addresses_self(turn: dict[str, str]) -> bool:
    """The speaker's own name used as a vocative: at the start ("Priya, ...") or after a clause ("Thanks, Priya!")."""
    name = re.escape(turn["speaker"])
    return re.search(rf"(^|[,!.?]\s){name}[,!.?]", turn["text"]) is not None


SAMPLES = _samples()


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["sample_id"] for s in SAMPLES])
def test_speakers_take_turns_and_never_address_themselves(sample: dict[str, Any]) -> None:
    people = {sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"]}
    for name, turns in _sessions(sample).items():
        speakers = [turn["speaker"] for turn in turns]
        assert set(speakers) <= people, name
        assert all(a != b for a, b in zip(speakers, speakers[1:], strict=False)), f"{name}: same speaker twice"
        wrong = [(turn["dia_id"], turn["speaker"], turn["text"][:60]) for turn in turns if addresses_self(turn)]
        assert wrong == [], f"{name}: speakers address themselves, the turns are attributed to the wrong person"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["sample_id"] for s in SAMPLES])
def test_a_question_about_someone_is_answered_in_their_own_words(sample: dict[str, Any]) -> None:
    people = (sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"])
    turns = {turn["dia_id"]: turn for session in _sessions(sample).values() for turn in session}
    checked = 0
    for qa in sample["qa"]:
        named = [person for person in people if re.search(rf"\b{person}\b", qa["question"])]
        if len(named) != 1:
            continue
        for evidence in qa["evidence"]:
            turn = turns[evidence]
            if FIRST_PERSON.search(turn["text"]):
                checked += 1
                assert turn["speaker"] == named[0], (qa["question"], evidence, turn["speaker"], turn["text"][:60])
    assert checked >= 5


def test_the_checks_catch_swapped_speakers() -> None:
    assert addresses_self({"speaker": "Priya", "text": "Priya, I finished the Rotterdam marathon last Sunday!"})
    assert addresses_self({"speaker": "Olu", "text": "Congratulations, Olu! I am sorry I missed the opening."})
    assert not addresses_self({"speaker": "Tomas", "text": "Priya, I finished the Rotterdam marathon last Sunday!"})
    assert not addresses_self({"speaker": "Ana", "text": "Anastasia told me about the trip."})
