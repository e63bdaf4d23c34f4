"""Context for RAG: budget never exceeded (both measures), honest citations, chronological pieces."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest
from helpers import builders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.facade import Epimem
from epimem_client._adapters import citation_metadata, context_pieces
from epimem_client.models import ContextResult as ClientContext
from memory.models import Message
from retrieval.context import HEADER, ContextBuilder, PackingPolicy, day_header, named_speakers
from retrieval.types import ContextQuery

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
LINES = [
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "That's great! I painted a sunset over the lake last weekend.",
    "My kids loved the pottery class, we made little clay bowls.",
    "I'm researching adoption agencies, I want to give a child a loving home.",
    "We camped in the mountains and watched the Perseid meteor shower.",
    "I started running again, 5 km every morning before work.",
]


def fill(service: Epimem, group_id: str, sessions: int = 3) -> dict[str, str]:
    """A few sessions a week apart; returns message id -> content."""
    contents = {}
    for s in range(sessions):
        messages = []
        for i, line in enumerate(LINES):
            message_id = f"s{s}-m{i}"
            content = f"{line} (week {s})"
            contents[message_id] = content
            messages.append(
                {
                    "id": message_id,
                    "content": content,
                    "producer_id": ["Caroline", "Melanie"][i % 2],
                    "timestamp": (T0 + timedelta(days=7 * s, minutes=i)).isoformat(),
                }
            )
        service.add_messages(group_id, f"session-{s}", messages)
        service.flush(group_id, f"session-{s}")
    return contents


def check(result_text: str, citations: list, tokens: int, budget: int, contents: dict[str, str]) -> None:
    assert tokens <= budget
    assert math.ceil(len(result_text) / 4) <= budget
    if not citations:
        assert result_text == "" and tokens == 0
        return
    assert result_text.startswith(HEADER)
    stamps = [c.timestamp for c in citations]
    assert stamps == sorted(stamps)  # chronological
    cited = [m for c in citations for m in c.message_ids]
    assert len(cited) == len(set(cited))
    # Each piece opens with its marker: [1]..[N] in the order of the text, citation i is marker [i + 1], and the
    # text from one marker to the next holds the messages its citation names, verbatim (never one it does not).
    assert [c.marker for c in citations] == [f"[{n}]" for n in range(1, len(citations) + 1)]
    opened = list(re.finditer(r"^(\[\d+\]) ", result_text, flags=re.M))
    assert [found.group(1) for found in opened] == [c.marker for c in citations]
    ends = [found.start() for found in opened[1:]] + [len(result_text)]
    for citation, found, end in zip(citations, opened, ends, strict=True):
        assert citation.message_ids and citation.session_id.startswith("session-")
        piece = result_text[found.start() : end]
        for message_id in citation.message_ids:
            assert contents[message_id] in piece  # honest: the cited text is there verbatim
        assert not [m for m in set(contents) - set(citation.message_ids) if f"{contents[m]}\n" in piece + "\n"]
    # With day headers each day of the pieces has one date line, in order, before its first piece's marker.
    dated = re.findall(r"^\[\d{1,2} \w+ \d{4}\]$", result_text, flags=re.M)
    assert dated == list(dict.fromkeys(day_header(c.timestamp) for c in citations))


def test_context_shape_and_content(service: Epimem, group_id: str) -> None:
    contents = fill(service, group_id)
    result = service.context(group_id, "What did Melanie paint?", token_budget=300)
    check(result.text, result.citations, result.tokens, 300, contents)
    assert "painted a sunset" in result.text
    assert result.tokens == service.context_builder.count(result.text)
    # Everything fits into a large budget, and a scope keeps the rest out.
    whole = service.context(group_id, "weekly life", token_budget=5000)
    assert {m for c in whole.citations for m in c.message_ids} == set(contents)
    scoped = service.context(group_id, "weekly life", token_budget=5000, session_ids=["session-1"])
    assert {c.session_id for c in scoped.citations} == {"session-1"}
    windowed = service.context(
        group_id, "weekly life", token_budget=5000, start=T0 + timedelta(days=10), end=T0 + timedelta(days=20)
    )
    assert {c.session_id for c in windowed.citations} == {"session-2"}


def test_context_of_an_empty_group_is_empty(service: Epimem, group_id: str) -> None:
    result = service.context(group_id, "anything", token_budget=100)
    assert result.text == "" and result.citations == [] and result.tokens == 0


def test_budget_is_never_exceeded(service: Epimem, group_id: str) -> None:
    contents = fill(service, group_id)
    builder = ContextBuilder(
        read_model=service.read_model, embedder=service.embedder, count_wordpieces=service.embedder.count_tokens
    )

    # Markers and date lines included: the running count is the text's count, within the budget.
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        budget=st.integers(min_value=16, max_value=1500),
        query=st.sampled_from(["painting", "adoption agency", "running every morning", "meteor shower camping"]),
    )
    def prop(budget: int, query: str) -> None:
        result = builder.build(group_id, ContextQuery(query=query, token_budget=budget))
        check(result.text, result.citations, result.tokens, budget, contents)
        assert result.tokens == builder.count(result.text)

    prop()


def test_both_token_measures_hold_and_chars_only_counts_characters(make_service, group_id: str) -> None:
    strict = make_service()
    contents = fill(strict, group_id)
    chars = make_service(context_token_count="chars")
    wordpieces = strict.embedder.count_tokens
    for budget in (40, 90, 200, 600):
        result = strict.context(group_id, "painting and adoption", token_budget=budget)
        check(result.text, result.citations, result.tokens, budget, contents)
        assert wordpieces(result.text) <= result.tokens == strict.context_builder.count(result.text)
        loose = chars.context(group_id, "painting and adoption", token_budget=budget)
        check(loose.text, loose.citations, loose.tokens, budget, contents)
        assert loose.tokens == math.ceil(len(loose.text) / 4)
    line = "Caroline: I'm researching adoption agencies, 5 km."
    assert chars.context_builder.count(line) == math.ceil(len(line) / 4) <= strict.context_builder.count(line)


def test_the_speakers_a_query_names_are_found_by_whole_name() -> None:
    messages = [
        Message(id=str(i), role="user", content="hi", timestamp=T0, producer_id=name)
        for i, name in enumerate(["Melanie", "Caroline", "Dr. Who", "Al"])
    ]
    assert named_speakers("What did Melanie paint?", messages) == {"melanie"}
    assert named_speakers("what did MELANIE and caroline do", messages) == {"melanie", "caroline"}
    assert named_speakers("Melanies and Caroline's plans", messages) == {"caroline"}
    assert named_speakers("What did Dr. Who say?", messages) == {"dr. who"}
    assert named_speakers("What did Alice say?", messages) == set()


def test_a_named_speaker_s_message_comes_first_in_a_tight_budget(service: Epimem, group_id: str) -> None:
    lines = [
        ("Melanie", "I painted a lake at sunset last weekend."),
        ("Caroline", "I painted a lake at dawn last week."),
    ]
    service.add_messages(group_id, "s", builders.turns(lines * 3, start=T0))
    service.flush(group_id, "s")
    for name in ("Melanie", "Caroline"):
        result = service.context(group_id, f"What did {name} paint?", token_budget=40)
        turns = [re.sub(r"^\[\d+\] ", "", line) for line in result.text.splitlines()[2:] if line != "…"]
        assert turns and all(line.startswith(f"{name}:") for line in turns), result.text


def test_the_cap_margin_can_shrink_as_the_budget_grows() -> None:
    policy = PackingPolicy(speaker_cap_margin=0.15, cap_budget=500, cap_decay=1.0)
    assert policy.at_budget(400) == policy and policy.at_budget(500) == policy
    assert policy.at_budget(1000).speaker_cap_margin == 0.075
    assert policy.at_budget(2000).speaker_cap_margin == 0.0375
    assert replace(policy, cap_decay=2.0).at_budget(1000).speaker_cap_margin == 0.0375  # 0.15 * (1/2) ** 2
    fixed = replace(policy, cap_budget=None)
    assert fixed.at_budget(2000) == fixed  # the same margin at every budget
    default = PackingPolicy()  # 0.15 up to 800 tokens, then 0.15 * (800 / budget) ** 2
    assert default.at_budget(800) == default
    assert default.at_budget(1000).speaker_cap_margin == pytest.approx(0.096)
    assert default.at_budget(2000).speaker_cap_margin == pytest.approx(0.024)


def test_a_message_from_the_time_the_query_names_comes_first(service: Epimem, group_id: str) -> None:
    # The same words on three days: only the date in the question tells them apart.
    for day in range(3):
        when = T0 + timedelta(days=day)
        service.add_messages(
            group_id,
            f"day-{day}",
            [
                {
                    "id": f"d{day}",
                    "content": "I baked bread with my kids today.",
                    "producer_id": "Melanie",
                    "timestamp": when.isoformat(),
                },
                {
                    "id": f"r{day}",
                    "content": "Lovely, enjoy it!",
                    "producer_id": "Caroline",
                    "timestamp": (when + timedelta(minutes=1)).isoformat(),
                },
            ],
        )
        service.flush(group_id, f"day-{day}")
    for day in range(3):
        when = T0 + timedelta(days=day)
        result = service.context(group_id, f"What did Melanie bake on {when:%d %B %Y}?", token_budget=26)
        assert [m for c in result.citations for m in c.message_ids] == [f"d{day}"], result.text
        # A relative time is read against the request's reference time (and timezone).
        relative = service.context(
            group_id, "What did Melanie bake yesterday?", token_budget=26, reference_time=when + timedelta(days=1)
        )
        assert [m for c in relative.citations for m in c.message_ids] == [f"d{day}"], relative.text


def test_a_turn_that_only_asks_yields_to_its_answer(service: Epimem, group_id: str) -> None:
    messages = [
        ("Caroline", "Which book did you read on the plane?"),
        ("Melanie", "I read a book on the plane, a thriller about a heist."),
    ]
    service.add_messages(group_id, "s", builders.turns(messages, start=T0))
    service.flush(group_id, "s")
    builder = service.context_builder
    query = ContextQuery(query="which book was read on the plane", token_budget=36)  # room for one turn
    chosen = {}
    for penalty in (0.0, 0.5):
        builder.policy = replace(builder.policy, question_penalty=penalty)
        chosen[penalty] = [m for c in builder.build(group_id, query).citations for m in c.message_ids]
    # The question is the closer match; the penalty lets the answer take the one place.
    assert chosen == {0.0: ["m0"], 0.5: ["m1"]}


def test_the_best_message_is_found_outside_the_best_ranked_episodes(make_service, group_id: str) -> None:
    # Session "a" talks about the garden all along (many records match: its fused standing is high);
    # session "b" is about other things but for one exact turn.
    service = make_service(segmentation_method="window")
    garden = [
        "The garden looks lovely this spring.",
        "We spent the morning in the garden again.",
        "Our garden gets a lot of sun in the afternoon.",
        "I bought a new hose for the garden.",
        "The neighbours admire our garden.",
        "Garden work makes me happy.",
    ]
    other = [
        "My car needs new tyres before the trip.",
        "Ana planted the tomato seedlings in the garden on Sunday.",
        "The tax forms are due next month.",
        "I watched a documentary about whales.",
    ]
    for session, lines in (("a", garden), ("b", other)):
        service.add_messages(group_id, session, builders.turns([("Ana", line) for line in lines], prefix=session))
        service.flush(group_id, session)
    query = ContextQuery(query="When were the tomato seedlings planted in the garden?", token_budget=40)

    def cited(select: Literal["group", "episodes"]) -> list[str]:
        builder = ContextBuilder(
            read_model=service.read_model,
            embedder=service.embedder,
            policy=PackingPolicy(select=select, max_episodes=1),
        )
        return [m for c in builder.build(group_id, query).citations for m in c.message_ids]

    assert all(m.startswith("a") for m in cited("episodes"))  # the best-ranked episode is the garden talk
    assert "b1" in cited("group")  # scoring every message finds the exact turn


def add_bowl_chat(service: Epimem, group_id: str) -> None:
    """A long chat: the same remark comes back on later days; what was said once, early, matches a little less.
    Sessions a day apart, one per day: each is its own episode and its own date line."""
    remark = "That bowl you made in pottery class is lovely!"
    days = [[("Ben", "Ana made the black and white bowl herself, in her pottery class.")]]
    days += [[("Ben", f"{remark} {tail}")] for tail in ("Really.", "Truly.", "Honestly.", "So nice.")]
    for day, lines in enumerate(days):
        service.add_messages(
            group_id, f"day-{day}", builders.turns(lines, prefix=f"d{day}-", start=T0 + timedelta(days=day))
        )
        service.flush(group_id, f"day-{day}")


def test_the_older_of_near_equal_matches_comes_first(service: Epimem, group_id: str) -> None:
    add_bowl_chat(service, group_id)
    query = ContextQuery(query="That bowl from pottery class is lovely", token_budget=75)  # room for three

    def cited(query: ContextQuery = query, **knobs: float) -> list[str]:
        builder = ContextBuilder(
            read_model=service.read_model, embedder=service.embedder, policy=PackingPolicy(**knobs)
        )
        result = builder.build(group_id, query)
        assert result.tokens <= query.token_budget
        return [m for c in result.citations for m in c.message_ids]

    assert "d0-0" not in cited()  # the later repeats fill the budget
    # primacy: the older of near-equal matches first (the original is the oldest of five: nothing taken from it)
    assert "d0-0" in cited(primacy=1.0)
    # ... but not when the query asks for recent messages
    assert "d0-0" not in cited(query.model_copy(update={"recency_weight": 0.5}), primacy=1.0)


def test_the_adapters_cut_the_text_into_its_cited_pieces(service: Epimem, group_id: str) -> None:
    contents = fill(service, group_id)
    builder = ContextBuilder(read_model=service.read_model, embedder=service.embedder)
    result = builder.build(group_id, ContextQuery(query="painting and running", token_budget=400))
    pieces = context_pieces(ClientContext.model_validate(result.model_dump(mode="json")))
    assert len(result.citations) >= 3 and [c.marker for _t, c in pieces if c] == [c.marker for c in result.citations]
    for text, citation in pieces:
        assert citation is not None
        lines = text.splitlines()
        # A piece is its day's date line, then its lines from its marker on.
        assert lines[1].startswith(f"{citation.marker} ") and lines[0] == day_header(citation.timestamp)
        assert all(contents[m] in text for m in citation.message_ids)
        assert citation_metadata(citation)["marker"] == citation.marker
    # Every message line of the text is in exactly one piece.
    told = [line for line in result.text.splitlines()[1:] if not re.fullmatch(r"\[\d{1,2} \w+ \d{4}\]", line)]
    assert [line for text, _c in pieces for line in text.splitlines()[1:]] == told
