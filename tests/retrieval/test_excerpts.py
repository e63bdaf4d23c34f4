"""Excerpts: a long message is packed as the part that matters to the query, cited with its span; the whole
message is one call away (facade, HTTP, the Python client)."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.facade import Epimem
from api.server import create_app
from epimem_client._adapters import citation_metadata, context_pieces
from epimem_client.models import ContextResult as ClientContext
from memory.text import INDENT, shown_lines
from retrieval import excerpts
from retrieval.context import PackingPolicy
from retrieval.excerpts import MARK, excerpt_span, excerpt_text, query_words, unit_spans
from retrieval.types import ContextResult

T0 = datetime(2024, 3, 15, 9, 0, tzinfo=UTC)
LIMIT = PackingPolicy().excerpt_tokens * 4  # type: ignore[operator]
FILLER = [
    "Start by listing every task the launch depends on and estimate each one in hours.",
    "Keep the estimates honest: add a buffer of twenty percent for reviews and surprises.",
    "Group the tasks by component so that each sprint delivers something a user can try.",
    "Here is a small helper for the planning sheet:\n```python\ndef hours(tasks):\n"
    "    return sum(t.estimate for t in tasks)\n```",
    "Review the backlog with the team every Monday and move anything blocked to the next sprint.",
    "Track the velocity of each sprint; after two sprints the estimates become far more reliable.",
]
FACT = "Your first sprint ends on March 29, two days before the investor demo."


def long_reply(fact_at: int, paragraphs: int = 24) -> str:
    body = [FILLER[i % len(FILLER)] for i in range(paragraphs)]
    body.insert(fact_at, FACT)
    return "\n\n".join(body)


@pytest.fixture(scope="module")
def memory(embedded_service: Epimem) -> Epimem:
    return embedded_service


def add_chat(service: Epimem, group_id: str, reply: str) -> None:
    messages = [
        ("u1", "user", "I'm planning two-week sprints for the budget tracker, starting March 15."),
        ("a1", "assistant", reply),
        ("u2", "user", "Thanks, I'll set up the planning sheet tonight."),
    ]
    service.add_messages(
        group_id,
        "chat-1",
        [
            {"id": i, "role": role, "content": text, "timestamp": (T0 + timedelta(minutes=n)).isoformat()}
            for n, (i, role, text) in enumerate(messages)
        ],
    )
    service.flush(group_id, "chat-1")


def check_excerpts(result: ContextResult, budget: int, contents: dict[str, str]) -> None:
    """Within budget by both measures; each excerpt's span lies in its message, holds at most LIMIT characters,
    and its text (its lines as a context shows them, marked where the message goes on) is in the context text."""
    assert result.tokens <= budget and math.ceil(len(result.text) / 4) <= budget
    for citation in result.citations:
        for excerpt in citation.excerpts:
            assert excerpt.message_id in citation.message_ids
            content = contents[excerpt.message_id]
            assert 0 <= excerpt.start < excerpt.end <= len(content) and excerpt.end - excerpt.start <= LIMIT
            assert f" (excerpt): {excerpt_text(content, (excerpt.start, excerpt.end))}\n" in f"{result.text}\n"


@pytest.mark.parametrize("fact_at", [0, 12, 24])
def test_a_long_message_is_packed_as_the_excerpt_that_answers(memory: Epimem, fact_at: int) -> None:
    group_id = f"excerpt-{fact_at}"
    reply = long_reply(fact_at)
    assert len(reply) > 3 * LIMIT
    add_chat(memory, group_id, reply)
    result = memory.context(group_id, "When does my first sprint end?", token_budget=200)
    check_excerpts(result, 200, {"a1": reply})
    excerpts = [e for c in result.citations for e in c.excerpts]
    assert [e.message_id for e in excerpts] == ["a1"]
    held = reply[excerpts[0].start : excerpts[0].end]
    assert FACT in held  # the part that answers, wherever it stands in the message
    assert ("(excerpt): " + MARK) in result.text if excerpts[0].start > 0 else True
    cited = {m for c in result.citations for m in c.message_ids}
    assert "u1" in cited  # the short messages are held whole, beside it
    assert all(e.message_id != "u1" for e in excerpts)
    # The whole message is one call away.
    assert memory.get_message(group_id, "chat-1", "a1").content == reply


def test_without_excerpts_the_long_message_does_not_fit_a_small_budget(memory: Epimem) -> None:
    group_id = "excerpt-off"
    reply = long_reply(6)
    add_chat(memory, group_id, reply)
    builder = memory.context_builder
    whole = builder.policy
    try:
        builder.policy = replace(whole, excerpt_tokens=None)
        result = memory.context(group_id, "When does my first sprint end?", token_budget=200)
    finally:
        builder.policy = whole
    assert "a1" not in {m for c in result.citations for m in c.message_ids}
    assert not [e for c in result.citations for e in c.excerpts] and "(excerpt)" not in result.text


def test_a_word_deep_in_a_long_message_is_found_and_shown(memory: Epimem) -> None:
    """Past the model's window (the first 256 wordpieces): the keyword index reads the whole text, and the excerpt
    shows where the word stands."""
    group_id = "excerpt-deep"
    reply = "\n\n".join([FILLER[i % len(FILLER)] for i in range(400)] + ["The staging database is called ravenwood."])
    add_chat(memory, group_id, reply)
    result = memory.context(group_id, "What is the staging database called?", token_budget=300)
    check_excerpts(result, 300, {"a1": reply})
    (excerpt,) = [e for c in result.citations for e in c.excerpts]
    assert "ravenwood" in reply[excerpt.start : excerpt.end] and excerpt.end == len(reply)


def test_http_citations_carry_spans_and_the_message_is_one_call_away(memory: Epimem, tmp_path: Path) -> None:
    group_id = "excerpt-http"
    reply = long_reply(3)
    add_chat(memory, group_id, reply)
    with TestClient(create_app(memory)) as client:
        answer = client.post(f"/v1/groups/{group_id}/context", json={"query": "first sprint end?", "token_budget": 200})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        spans = [e for c in body["citations"] for e in c["excerpts"]]
        assert [e["message_id"] for e in spans] == ["a1"]
        assert FACT in reply[spans[0]["start"] : spans[0]["end"]]
        parsed = ClientContext.model_validate(body)  # the thin client reads them too
        (holding,) = [c for c in parsed.citations if c.excerpts]
        assert citation_metadata(holding)["excerpts"] == [spans[0]]
        whole = client.get(f"/v1/groups/{group_id}/sessions/chat-1/messages/a1")
        assert whole.status_code == 200 and whole.json()["message"]["content"] == reply
        assert client.get(f"/v1/groups/{group_id}/sessions/chat-1/messages/nope").status_code == 404
        assert client.get(f"/v1/groups/{group_id}/sessions/other/messages/a1").status_code == 404
        assert client.get(f"/v1/groups/other-{group_id}/sessions/chat-1/messages/a1").status_code == 404
        assert client.get(f"/v1/groups/{group_id}/sessions/chat-1/messages/a%01b").status_code == 422


def test_a_context_shows_each_message_with_its_lines_and_the_adapters_keep_them_in_their_piece(memory: Epimem) -> None:
    group_id = "excerpt-lines"
    ask = "Two things for the sprint plan:\n\n- it starts on March 15\n- each sprint lasts two weeks"
    reply = "\n\n".join([FILLER[i % 3] for i in range(12)] + [CODE_REPLY + "Call sprint_end with the first day."])
    memory.add_messages(
        group_id,
        "chat-1",
        [
            {"id": i, "role": role, "content": text, "timestamp": (T0 + timedelta(minutes=n)).isoformat()}
            for n, (i, role, text) in enumerate([("u1", "user", ask), ("a1", "assistant", reply)])
        ],
    )
    memory.flush(group_id, "chat-1")
    result = memory.context(group_id, "How does sprint_end compute the sprint plan's end?", token_budget=300)
    check_excerpts(result, 300, {"a1": reply})
    assert result.tokens == memory.context_builder.count(result.text)
    assert "user: Two things for the sprint plan:\n  - it starts on March 15\n  - each sprint lasts two weeks\n" in (
        result.text + "\n"
    )
    (excerpt,) = [e for c in result.citations for e in c.excerpts]
    assert "def sprint_end(start):\n      if start is None:\n          return None" in result.text
    assert "sprint_end" in reply[excerpt.start : excerpt.end]
    pieces = context_pieces(ClientContext.model_validate(result.model_dump(mode="json")))
    assert len(pieces) == len(result.citations) and all(citation is not None for _text, citation in pieces)
    (text,) = [text for text, citation in pieces if citation is not None and "a1" in citation.message_ids]
    assert "      if start is None:" in text and "  - each sprint lasts two weeks" in text


def test_multi_line_messages_keep_the_budget_exact_and_the_pieces_apart(memory: Epimem) -> None:
    """Paragraphs, lists and code, whole or as excerpts, at every budget: within it by both measures, the count
    the text's own, each whole message shown with its lines, and the adapters find every piece."""
    group_id = "excerpt-lines-budget"
    texts = [
        "Two things for the sprint plan:\n\n- it starts on March 15\n- each sprint lasts two weeks",
        CODE_REPLY + "Call sprint_end with the first day of the sprint.",
        "\n\n".join([FILLER[i % len(FILLER)] for i in range(10)] + [CODE_REPLY, FACT]),
        "Thanks!\n\tI will paste the helper into the planning sheet.\n\n    Then run it on Monday.",
    ]
    memory.add_messages(
        group_id,
        "chat-1",
        [
            {
                "id": f"m{n}",
                "role": ("user", "assistant")[n % 2],
                "content": text,
                "timestamp": (T0 + timedelta(minutes=n)).isoformat(),
            }
            for n, text in enumerate(texts * 2)
        ],
    )
    memory.flush(group_id, "chat-1")
    contents = {f"m{n}": text for n, text in enumerate(texts * 2)}

    @settings(max_examples=40, deadline=None)
    @given(budget=st.integers(min_value=16, max_value=1200), query=st.sampled_from(["sprint_end helper", "March 15"]))
    def prop(budget: int, query: str) -> None:
        result = memory.context(group_id, query, token_budget=budget)
        check_excerpts(result, budget, contents)
        assert result.tokens == memory.context_builder.count(result.text)
        held = {e.message_id for c in result.citations for e in c.excerpts}
        for message_id in {m for c in result.citations for m in c.message_ids} - held:
            assert shown_lines(contents[message_id]) in result.text
        pieces = context_pieces(ClientContext.model_validate(result.model_dump(mode="json")))
        assert len(pieces) == len(result.citations) and all(citation is not None for _t, citation in pieces)

    prop()


# -- the units and the choice ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=600), st.integers(min_value=1, max_value=120))
def test_units_cover_every_visible_character_within_the_limit(content: str, limit: int) -> None:
    spans = unit_spans(content, limit)
    covered: set[int] = set()
    previous_end = 0
    for start, end in spans:
        assert previous_end <= start < end <= len(content) and end - start <= limit
        assert not content[start].isspace() and not content[end - 1].isspace()
        covered |= set(range(start, end))
        previous_end = end
    assert {i for i, char in enumerate(content) if not char.isspace()} <= covered


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(FILLER + [FACT]), min_size=1, max_size=30), st.integers(min_value=40, max_value=900))
def test_the_excerpt_is_a_span_within_the_limit_holding_the_query_s_rarest_words(parts: list[str], limit: int) -> None:
    content = "\n".join(parts)
    start, end = excerpt_span(content, query_words("first sprint ends March"), limit)
    assert 0 <= start < end <= len(content) and end - start <= max(limit, 1)
    if FACT in parts and len(FACT) <= limit:
        assert FACT in content[start:end]


def test_without_a_query_word_the_excerpt_is_the_opening() -> None:
    content = long_reply(5)
    start, end = excerpt_span(content, query_words("zebra"), LIMIT)
    assert start == 0 and end <= LIMIT and content[:end].rstrip() == content[:end]
    text = excerpt_text(content, (start, end))
    assert text.endswith(" " + MARK) and not text.startswith(MARK)
    assert excerpt_text(content, (0, len(content))) == shown_lines(content)


CODE_REPLY = (
    "Here is the helper for the planning sheet:\n\n```python\ndef sprint_end(start):\n    if start is None:\n"
    "        return None\n    return start  +  timedelta(days=14)\n```\n"
)


def test_code_keeps_its_lines_and_its_shape() -> None:
    assert shown_lines(CODE_REPLY) == (
        "Here is the helper for the planning sheet:\n  ```python\n  def sprint_end(start):\n      if start is None:\n"
        "          return None\n      return start + timedelta(days=14)\n  ```"
    )
    nested = "    for task in tasks:\n        total += task.hours\n    return total"
    # the least indentation of the lines is taken off
    assert shown_lines(nested) == "for task in tasks:\n      total += task.hours\n  return total"
    assert shown_lines("\tif ready:\n\t\tship()") == "if ready:\n      ship()"  # a tab is four columns
    start = CODE_REPLY.index("if start")  # a span that opens an indented line keeps it, against which the rest stand
    assert excerpt_text(CODE_REPLY, (start, CODE_REPLY.index("```\n", start))) == (
        f"{MARK} if start is None:\n      return None\n  return start + timedelta(days=14) {MARK}"
    )


@pytest.mark.parametrize("end", ["\r", "\r\n", "\u2028", "\x85"])
def test_an_excerpt_opening_a_line_keeps_its_indentation_whatever_ends_the_lines(end: str) -> None:
    content = CODE_REPLY.replace("\n", end)
    start = content.index("if start")
    assert excerpt_text(content, (start, content.index("```" + end, start))) == (
        f"{MARK} if start is None:\n      return None\n  return start + timedelta(days=14) {MARK}"
    )


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=400))
@example("a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i\rj\r\nk\x1fl\u00a0m")  # every line end str.splitlines knows
def test_a_message_is_shown_with_every_word_and_no_line_that_could_open_another(text: str) -> None:
    """Whatever a message holds (any Unicode line end or space), its shown text has the same words in the same
    order, one line per non-blank line of it, spaces and newlines as its only whitespace, and every line but the
    first indented, so none can be read as a marker, a date line or another message."""
    shown = shown_lines(text)
    assert shown.split() == text.split()
    lines = shown.split("\n") if shown else []
    assert len(lines) == sum(1 for line in text.splitlines() if line.split())
    assert all(char in " \n" for char in shown if char.isspace())
    assert all(line.strip() and not line[0].isspace() for line in lines[:1])
    assert all(line.startswith(INDENT) and line.strip() for line in lines[1:])


def test_the_units_kept_are_bounded_by_their_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(excerpts, "UNITS_CACHE_CHARS", 5_000)
    monkeypatch.setattr(excerpts, "_units_cache", OrderedDict())
    monkeypatch.setattr(excerpts, "_units_cache_chars", 0)
    texts = [long_reply(n % 24) + f" Number {n}." for n in range(6)]  # ~2,300 characters each
    first = excerpts.units(texts[0], LIMIT)
    assert excerpts.units(texts[0], LIMIT) is first  # kept
    for text in texts[1:]:
        excerpts.units(text, LIMIT)
    assert excerpts._units_cache_chars <= 5_000 and len(excerpts._units_cache) == 2
    assert excerpts.units(texts[0], LIMIT) is not first and excerpts.units(texts[0], LIMIT) == first  # cut again
    huge = "word " * 1_000
    excerpts.units(huge, LIMIT)
    assert (huge, LIMIT) in excerpts._units_cache
