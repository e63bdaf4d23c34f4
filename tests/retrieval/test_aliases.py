"""Names people use: speaker aliases set by a client or learned from how speakers address each other."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers.builders import turns
from helpers.docs_blocks import blocks
from helpers.paths import DOCS

from api.facade import Epimem
from api.http.schemas import GroupConfigurationIn
from memory.errors import InvalidInputError
from memory.ingest.importers import normalise_realtalk_evidence, read_realtalk
from memory.models import GroupConfiguration, SessionInfo
from retrieval.names import configured_names, learned_names, named_in, without_names
from retrieval.speaker_names import speaker_names

T0 = datetime(2024, 1, 6, 19, 0, tzinfo=UTC)


def chat(lines: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(speaker, text) between emi and elise -> (speaker, addressee, text)."""
    return [(speaker, "elise" if speaker == "emi" else "emi", text) for speaker, text in lines]


def test_learned_from_vocatives_and_introductions() -> None:
    lines = [
        ("elise", "Hey Kate! How was your day?"),
        ("emi", "Great, I went skiing in Aspen!"),
        ("elise", "That looks amazing Kate!"),
        ("emi", "Aspen was so fun, I love Aspen!"),
        ("elise", "What about you Kate? Any plans?"),
        ("elise", "I flew to Houston! Houston! Really, in Houston!"),
        ("emi", "Hi, my name is Kate by the way."),
        ("elise", "Nice, call me Emily."),
    ]
    names = learned_names(chat(lines))
    assert names["emi"] == {"kate"}
    assert names["elise"] == {"emily"}  # "call me Emily"; "Houston" follows "to"/"in" or opens a sentence


def test_a_word_both_use_is_not_a_name() -> None:
    lines = [("elise", f"Have you been to the beach with Max? I miss Max! {i}") for i in range(4)]
    lines += [("emi", "Max is my dog. Max! Max! Max!")]
    names = learned_names(chat(lines))
    assert "max" not in names.get("emi", set())  # emi writes "Max" as often as elise calls it


def test_too_few_vocatives_learn_nothing() -> None:
    learned = learned_names(chat([("elise", "Hey Kate!"), ("elise", "Thanks Kate!")]))
    assert not any(learned.values())


def test_configured_names_read_the_documented_keys_and_ignore_other_shapes() -> None:
    metadata = [
        {"speakers": {"Elise": {"display_name": "Kate", "aliases": ["Katie", " K "]}}},
        {"speakers": {"emi": {"aliases": ["Bella"]}, "bad": "not a mapping"}},
        {"speakers": ["not", "a", "mapping"]},
        {"other": 1},
    ]
    assert configured_names(metadata) == {"elise": {"kate", "katie", "k"}, "emi": {"bella"}}


def test_named_in_matches_ids_and_names_as_whole_words() -> None:
    names = {"emi": {"kate"}}
    assert named_in("What are Kate's hobbies?", ["emi", "elise"], names) == {"emi"}
    assert named_in("Which cities have Kate and Elise visited?", ["emi", "elise"], names) == {"emi", "elise"}
    assert named_in("What did Katerina say?", ["emi", "elise"], names) == set()
    assert named_in("What did Emi say?", ["emi"]) == {"emi"}


def test_without_names_leaves_out_the_named_speakers_ids_and_names() -> None:
    names = {"emi": {"kate"}, "elise": {"emily"}}
    assert without_names("What are Kate's hobbies?", {"emi"}, names) == "What are hobbies?"
    assert without_names("Which cities have Kate and Elise visited?", {"emi", "elise"}, names) == (
        "Which cities have and visited?"
    )
    assert without_names("What did emi say to Emily?", {"emi"}, names) == "What did say to Emily?"  # emi only
    assert without_names("What did Katerina say?", {"emi"}, names) == "What did Katerina say?"  # whole words
    assert without_names("Kate?", {"emi"}, names) == "Kate?"  # nothing left to match: the query as it was


def add_two_speakers(service: Epimem, group_id: str) -> None:
    for session, (speaker, line) in enumerate(
        [("u1", "I love painting landscapes on weekends."), ("u2", "I love painting portraits on weekends.")]
    ):
        for repeat in range(3):  # a few sessions each, so that the budget decides what is kept
            session_id = f"s{session}-{repeat}"
            stamp = T0 + timedelta(days=session * 3 + repeat)
            messages = [
                {"id": f"{session_id}-a", "content": f"{line} ({repeat})", "producer_id": speaker, "timestamp": stamp},
                {
                    "id": f"{session_id}-b",
                    "content": "Nice, tell me more.",
                    "producer_id": "u2" if speaker == "u1" else "u1",
                    "timestamp": stamp + timedelta(minutes=1),
                },
            ]
            service.add_messages(group_id, session_id, messages)
            service.flush(group_id, session_id)


@pytest.mark.slow
def test_group_metadata_names_a_speaker_for_context_and_search(service: Epimem, group_id: str) -> None:
    add_two_speakers(service, group_id)
    assert speaker_names(service.read_model.reader(group_id)).get("u1", set()) == set()
    service.put_group(GroupConfiguration(group_id=group_id, metadata={"speakers": {"u1": {"display_name": "Kate"}}}))
    assert speaker_names(service.read_model.reader(group_id))["u1"] == {"kate"}

    # Room for two of Kate's turns, each a piece with its marker (a tighter budget is filled by the other speaker's
    # short reply in the same piece: greedy, whatever fits).
    result = service.context(group_id, "What does Kate love painting?", token_budget=52)
    cited = [m for citation in result.citations for m in citation.message_ids]
    said_by_u1 = {f"s0-{r}-a" for r in range(3)} | {f"s1-{r}-b" for r in range(3)}
    assert cited and set(cited) <= said_by_u1, result.text  # Kate's (u1's) messages only
    assert "u1: I love painting landscapes" in result.text

    hits = service.search(group_id, "What does Kate love painting?", k=3)
    assert hits[0].episode.session_id.startswith("s0-")
    assert hits[0].components.fused > 0  # the response keeps its shape


@pytest.mark.slow
def test_session_metadata_names_count_for_the_group(service: Epimem, group_id: str) -> None:
    add_two_speakers(service, group_id)
    service.put_session(
        SessionInfo(group_id=group_id, session_id="s1-0", metadata={"speakers": {"u2": {"aliases": ["Liza"]}}})
    )
    assert speaker_names(service.read_model.reader(group_id))["u2"] == {"liza"}
    result = service.context(group_id, "What does Liza love painting?", token_budget=40)
    assert "u2: I love painting portraits" in result.text


def test_names_learned_from_the_conversation_reach_the_query(service: Epimem, group_id: str) -> None:
    lines = [
        ("elise", "Hey Kate! What did you do today?"),
        ("emi", "I baked a lemon tart for my neighbours."),
        ("elise", "That looks amazing Kate!"),
        ("emi", "Thanks! The recipe is from my grandmother."),
        ("elise", "What about you Kate? Baking again tomorrow?"),
        ("emi", "Probably bread, I love sourdough."),
        ("elise", "I baked a lemon cake for my colleagues."),
    ]
    service.add_messages(group_id, "chat", turns(lines, start=T0))
    service.flush(group_id, "chat")
    assert speaker_names(service.read_model.reader(group_id))["emi"] == {"kate"}
    result = service.context(group_id, "What did Kate bake?", token_budget=60)
    assert "emi: I baked a lemon tart" in result.text


def realtalk_file(tmp_path: Path, evidence: list[str]) -> Path:
    session = [
        {"clean_text": text, "speaker": speaker, "date_time": stamp, "dia_id": dia_id, "img_file": [], "img_url": []}
        for text, speaker, stamp, dia_id in [
            ("Hey Kate!", "elise", "29.12.2023, 22:42:04", "D1:1"),
            ("Hi! I went skiing.", "Emi", "29.12.2023, 22:50:00", "D1:2"),
            ("", "elise", "30.12.2023, 09:05:10", "D1:3"),
            ("Nice!", "Emi", "02.01.2024, 10:00:00", "D2:1"),
        ]
    ]
    data = {
        "name": {"speaker_1": "Emi", "speaker_2": "elise"},
        "session_1": session[:3],
        "session_1_date_time": "29.12.2023, 22:42:04",
        "session_2": session[3:],
        "session_2_date_time": "02.01.2024, 10:00:00",
        "qa": [{"question": "When did Kate ski?", "answer": "29 Dec", "evidence": evidence, "category": 2}],
    }
    path = tmp_path / "Chat_9_Emi_Elise.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_realtalk_reader_keeps_each_message_time_and_speaker_ids(tmp_path: Path) -> None:
    sample = read_realtalk(realtalk_file(tmp_path, ["D1:2"]))
    assert sample.sample_id == "Chat_9_Emi_Elise" and sample.speakers == ("Emi", "elise")
    first, second, image = sample.sessions["session_1"]
    assert second.timestamp == datetime(2023, 12, 29, 22, 50, tzinfo=UTC)  # day first, its own time
    assert (first.producer_id, first.produced_for_id) == ("elise", "Emi")
    assert image.content == "[shared an image]" and image.id == "D1:3"
    assert sample.questions[0].evidence == ("D1:2",)


def test_realtalk_evidence_normalisation() -> None:
    known = {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D3:7"}
    assert normalise_realtalk_evidence(["D1:1-D1:3"], known) == ("D1:1", "D1:2", "D1:3")
    assert normalise_realtalk_evidence(["D1:2-3"], known) == ("D1:2", "D1:3")
    assert normalise_realtalk_evidence(["D1:3-D2:2"], known) == ("D1:3", "D2:2")  # across prefixes: the ends
    assert normalise_realtalk_evidence(["D:1:02", "D13:4. D2:1", "D9:9"], known) == ("D1:2", "D2:1")
    assert normalise_realtalk_evidence(["nothing"], known) == ()


def test_realtalk_reader_rejects_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidInputError):
        read_realtalk(path)
    broken = realtalk_file(tmp_path, [])
    data = json.loads(broken.read_text(encoding="utf-8"))
    data["session_1"][0]["date_time"] = "2023-99-99"
    broken.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="date_time"):
        read_realtalk(broken)


def test_the_documented_metadata_example_names_the_speaker() -> None:
    block = blocks(__file__, "json", DOCS / "retrieval.md")[0]
    body = json.loads(block)
    assert configured_names([body["metadata"]]) == {"emi": {"kate", "katie"}}
    assert GroupConfigurationIn.model_validate(body).metadata == body["metadata"]  # PUT /groups/{group}'s body
