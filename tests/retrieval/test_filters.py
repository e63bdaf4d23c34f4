"""Recall filters on both Chroma backends: speakers (by id or by a name the ranking knows), roles, episode
types and metadata values; search, context and the timeline honour them; bad filters are refused."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers.builders import REFERENCE, T0, turns
from pydantic import ValidationError

from api.facade import Epimem
from memory.models import GroupConfiguration
from retrieval.types import SearchQuery

EMAIL = [
    ("elise", "I signed up for the pottery class on Thursday evenings."),
    ("tom", "Nice, I am taking a woodworking course about making chairs."),
    ("elise", "My first pottery bowl cracked in the kiln."),
    ("tom", "My first chair wobbles but I love woodworking."),
]
SMS = [
    ("elise", "The pottery studio has a new glaze for bowls."),
    ("tom", "I bought oak planks for the next woodworking chair."),
]


@pytest.fixture
def seeded(service: Epimem, group_id: str) -> Epimem:
    service.put_group(GroupConfiguration(group_id=group_id, metadata={"speakers": {"elise": {"display_name": "Kate"}}}))
    service.add_messages(group_id, "email", turns(EMAIL, start=T0, metadata={"channel": "email"}))
    service.flush(group_id, "email")
    later = T0 + timedelta(days=3)
    service.add_messages(group_id, "sms", turns(SMS, prefix="s", start=later, metadata={"channel": "sms", "n": 1}))
    service.flush(group_id, "sms")
    return service


def _speakers(service: Epimem, group_id: str, session_id: str) -> dict[str, str]:
    return {m.id: m.producer_id or "" for m in service.history(group_id, session_id)}


def test_search_with_a_speaker_filter_names_only_that_speakers_messages(seeded: Epimem, group_id: str) -> None:
    speakers = _speakers(seeded, group_id, "email") | _speakers(seeded, group_id, "sms")
    unfiltered = seeded.search(group_id, "woodworking chair", k=5, expand=True)
    assert any(speakers[m] == "tom" for hit in unfiltered for m in hit.matched_message_ids)
    for name in ("elise", "Kate", "KATE"):  # the id, the display name set on the group, any case
        hits = seeded.search(group_id, "woodworking chair", k=5, expand=True, filter={"speakers": [name]})
        assert hits
        assert all(speakers[m] == "elise" for hit in hits for m in hit.matched_message_ids)
        assert all(m.producer_id == "elise" for hit in hits for m in hit.messages or [])
    assert seeded.search(group_id, "woodworking chair", k=5, filter={"speakers": ["nobody"]}) == []


def test_context_with_a_speaker_filter_cites_only_that_speaker(seeded: Epimem, group_id: str) -> None:
    speakers = _speakers(seeded, group_id, "email") | _speakers(seeded, group_id, "sms")
    plain = seeded.context(group_id, "pottery and woodworking", token_budget=1000)
    assert {speakers[m] for c in plain.citations for m in c.message_ids} == {"elise", "tom"}
    result = seeded.context(group_id, "pottery and woodworking", token_budget=1000, filter={"speakers": ["Kate"]})
    cited = [m for c in result.citations for m in c.message_ids]
    assert cited and {speakers[m] for m in cited} == {"elise"}
    assert "tom:" not in result.text and "elise:" in result.text


def test_metadata_roles_and_types(seeded: Epimem, group_id: str) -> None:
    email = seeded.search(group_id, "pottery", k=10, filter={"metadata": {"channel": "email"}})
    assert email and {h.episode.session_id for h in email} == {"email"}
    assert seeded.search(group_id, "pottery", k=10, filter={"metadata": {"n": "1"}}) == []  # "1" is not 1
    assert {h.episode.session_id for h in seeded.search(group_id, "pottery", k=10, filter={"metadata": {"n": 1}})} == {
        "sms"
    }
    both = {"metadata": {"channel": "sms"}, "speakers": ["tom"]}
    hits = seeded.search(group_id, "oak planks woodworking", k=10, filter=both)
    assert hits and all(m.startswith("s") for h in hits for m in h.matched_message_ids)
    assert seeded.search(group_id, "pottery", k=10, filter={"roles": ["assistant"]}) == []
    assert seeded.search(group_id, "pottery", k=10, filter={"roles": ["user"]})

    # episode user_metadata counts: a corrected episode's metadata
    (sms_episode,) = seeded.timeline(group_id, session_id="sms").episodes
    seeded.correct_episode(group_id, "sms", sms_episode.uuid, user_metadata={"reviewed": True})
    reviewed = seeded.timeline(group_id, filter={"metadata": {"reviewed": True}}).episodes
    assert [e.uuid for e in reviewed] == [sms_episode.uuid]

    seeded.generate_summaries(group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE)
    kinds = {e.episode_type.value for e in seeded.timeline(group_id, limit=50).episodes}
    assert kinds == {"episode", "summary"}
    only = seeded.timeline(group_id, limit=50, filter={"episode_types": ["summary"]}).episodes
    assert only and {e.episode_type.value for e in only} == {"summary"}
    by_tom = seeded.timeline(group_id, limit=50, filter={"speakers": ["tom"]}).episodes
    assert {e.episode_type.value for e in by_tom} == {"episode"} and len(by_tom) == 2


def test_timeline_pages_over_what_passes(seeded: Epimem, group_id: str) -> None:
    first = seeded.timeline(group_id, limit=1, filter={"speakers": ["elise"]})
    assert len(first.episodes) == 1 and first.next_cursor
    second = seeded.timeline(group_id, limit=1, cursor=first.next_cursor, filter={"speakers": ["elise"]})
    assert [e.session_id for e in first.episodes + second.episodes] == ["email", "sms"]
    assert second.next_cursor is None
    assert seeded.timeline(group_id, filter={"metadata": {"channel": "fax"}}).episodes == []


@pytest.mark.parametrize(
    "bad",
    [
        {"metadata": {"$where": "1"}},
        {"metadata": {"": "x"}},
        {"metadata": {"k" * 101: "x"}},
        {"metadata": {"k": {"$ne": 1}}},
        {"metadata": {"k": ["a"]}},
        {"metadata": {"k": None}},
        {"metadata": {}},
        {"metadata": "channel=email"},
        {"speakers": []},
        {"speakers": ["  "]},
        {"roles": ["admin"]},
        {"episode_types": ["fact"]},
        {"where": {"channel": "email"}},
    ],
)
def test_bad_filters_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        SearchQuery(query="pottery", filter=bad)
