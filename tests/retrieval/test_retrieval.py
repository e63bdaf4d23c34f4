"""Search: scope, absolute and natural-language windows, fusion, recency, dedupe, order, expand."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from helpers.builders import messages

from api.facade import Epimem
from memory.errors import InvalidInputError
from memory.readmodel.reader import unit
from retrieval.analysis import understand
from retrieval.keyword import KeywordIndex, keyword_index
from retrieval.message_rows import episode_rows
from retrieval.policy import ScoringPolicy
from retrieval.scoring import scored_rows
from retrieval.search import SCALE_MIDPOINT, scaled
from retrieval.types import ContextQuery, Order, SearchHit, SearchQuery

T0 = datetime(2023, 3, 1, 12, 0, tzinfo=UTC)
REF = datetime(2023, 3, 15, 10, 0, tzinfo=UTC)  # a Wednesday

TOPICS = {
    # session: (start, two turns)
    "hiking": (T0, ["We hiked up to Lake Tahoe on Saturday.", "The trail around the lake was steep but lovely."]),
    "cooking": (
        T0 + timedelta(days=7),
        ["I baked sourdough bread with rye flour.", "The crust came out dark and crunchy."],
    ),
    "violin": (
        T0 + timedelta(days=13),  # 14 March: "yesterday" relative to REF
        ["My violin recital is next month.", "I practise scales on the violin every morning."],
    ),
}


def add_topics(service: Epimem, group_id: str) -> None:
    for session, (start, texts) in TOPICS.items():
        batch = messages(len(texts), prefix=f"{session}-", start=start, text=texts, speakers=("Ana", "Ben"))
        service.add_messages(group_id, session, batch)
        service.flush(group_id, session)


def test_hybrid_search_finds_by_meaning_and_by_keyword(service: Epimem, group_id: str) -> None:
    add_topics(service, group_id)
    by_meaning = service.search(group_id, "playing a string instrument", k=3)
    assert by_meaning[0].episode.session_id == "violin"
    by_keyword = service.search(group_id, "sourdough", k=3)
    assert by_keyword[0].episode.session_id == "cooking"
    top = by_keyword[0].components
    assert top.keyword > 0 and top.vector > 0 and top.fused > 0 and top.recency == 1.0
    assert by_keyword[0].matched_message_ids  # the matching turn is named


def test_scope_sessions_and_windows(service: Epimem, group_id: str) -> None:
    add_topics(service, group_id)
    only = service.search(group_id, "lake trail bread violin", k=10, session_ids=["hiking", "violin"])
    assert {h.episode.session_id for h in only} == {"hiking", "violin"}
    one = service.search(group_id, "lake trail bread violin", k=10, session_ids=["cooking"])
    assert {h.episode.session_id for h in one} == {"cooking"}
    absolute = service.search(
        group_id, "lake trail bread violin", k=10, start=T0 + timedelta(days=5), end=T0 + timedelta(days=10)
    )
    assert {h.episode.session_id for h in absolute} == {"cooking"}
    yesterday = service.search(group_id, "lake trail bread violin", k=10, time="yesterday", reference_time=REF)
    assert {h.episode.session_id for h in yesterday} == {"violin"}
    last_week = service.search(group_id, "lake trail bread violin", k=10, time="last week", reference_time=REF)
    assert {h.episode.session_id for h in last_week} == {"cooking"}  # Monday 6 to Monday 13 March
    march = service.search(group_id, "lake trail bread violin", k=10, time="in March 2023", reference_time=REF)
    assert len({h.episode.session_id for h in march}) == 3
    # Both windows together: their intersection.
    both = service.search(
        group_id, "lake trail bread violin", k=10, time="in March 2023", reference_time=REF, end=T0 + timedelta(days=1)
    )
    assert {h.episode.session_id for h in both} == {"hiking"}
    # A timezone moves the day: at 02:00 UTC on 15 March it is still 14 March in Los Angeles.
    late = REF.replace(hour=2)
    assert service.search(group_id, "violin", k=10, time="today", reference_time=late) == []
    in_la = service.search(group_id, "violin", k=10, time="today", reference_time=late, timezone="America/Los_Angeles")
    assert {h.episode.session_id for h in in_la} == {"violin"}


def test_unreadable_time_is_a_clear_error(service: Epimem, group_id: str) -> None:
    add_topics(service, group_id)
    with pytest.raises(InvalidInputError, match="time window"):
        service.search(group_id, "violin", time="around teatime")


def test_order_expand_and_recency(service: Epimem, group_id: str) -> None:
    add_topics(service, group_id)
    chronological = service.search(group_id, "lake bread violin", k=10, order=Order.CHRONOLOGICAL, expand=True)
    assert [h.episode.session_id for h in chronological] == ["hiking", "cooking", "violin"]
    for hit in chronological:
        assert hit.messages is not None
        assert [m.id for m in hit.messages] == list(hit.episode.source_message_ids)
    plain = service.search(group_id, "a weekend activity", k=3)
    recent = service.search(group_id, "a weekend activity", k=3, recency_weight=1.0, reference_time=REF)
    assert all(hit.components.recency == 1.0 for hit in plain)
    assert recent[0].episode.session_id == "violin"  # the newest wins when recency is all that counts
    factors = {h.episode.session_id: h.components.recency for h in recent}
    assert factors["violin"] > factors["cooking"] > factors["hiking"]
    unweighted = {h.episode.uuid: h.components.raw for h in plain}  # fused rank + message evidence, recency 1
    for hit in recent:
        assert hit.components.raw == pytest.approx(unweighted[hit.episode.uuid] * hit.components.recency)
        assert hit.score == scaled(hit.components.raw)


def test_the_score_scale_rises_from_0_to_1() -> None:
    raws = [-1e6, -50.0, -1.0, 0.0, 1.0, 2.5, SCALE_MIDPOINT, 4.5, 6.0, 50.0, 1e6]
    scores = [scaled(raw) for raw in raws]
    assert scores == sorted(scores) and all(0.0 <= score <= 1.0 for score in scores)  # no overflow at either end
    assert len(set(scores[1:-1])) == len(scores) - 2  # strictly rising where floats can tell
    assert scaled(SCALE_MIDPOINT) == 0.5


def test_near_duplicates_are_removed(service: Epimem, group_id: str) -> None:
    text = ["I adopted a grey kitten called Miso from the shelter.", "Miso sleeps on my keyboard all day."]
    reworded = ["I adopted a grey kitten called Miso from the shelter!", "Miso sleeps on my keyboard all day long."]
    for session, texts in (("a", text), ("b", reworded), ("c", ["The bus to work was late again.", "Traffic."])):
        service.add_messages(
            group_id,
            session,
            [{"id": f"{session}{i}", "content": t, "timestamp": T0.isoformat()} for i, t in enumerate(texts)],
        )
        service.flush(group_id, session)
    deduped = service.search(group_id, "kitten Miso", k=5)
    sessions = [h.episode.session_id for h in deduped]
    assert sessions.count("a") + sessions.count("b") == 1, sessions  # one of the two near-identical episodes
    everything = service.search(group_id, SearchQuery(query="kitten Miso", k=5, dedupe=False))
    assert {"a", "b"} <= {h.episode.session_id for h in everything}


def test_keyword_index_is_built_once_per_change_not_per_query(service: Epimem, group_id: str) -> None:
    add_topics(service, group_id)
    indexes: list[KeywordIndex] = []  # every index the read path used, once each

    def searched(query: str) -> list[SearchHit]:
        hits = service.search(group_id, query, k=3)
        index = keyword_index(service.read_model.reader(group_id))  # the one the search read (no write since)
        if not any(index is seen for seen in indexes):
            indexes.append(index)
        return hits

    searched("violin")
    for query in ("lake", "bread", "scales", "recital"):
        searched(query)
        service.context(group_id, query, token_budget=200)
    assert len(indexes) == 1  # nothing changed: no rebuild
    service.add_messages(group_id, "new", [{"id": "n1", "content": "Chess club on Friday.", "timestamp": REF}])
    service.flush(group_id, "new")
    assert searched("chess club")[0].episode.session_id == "new"
    assert len(indexes) == 2
    service.delete_session(group_id, "new")
    assert all(h.episode.session_id != "new" for h in service.search(group_id, "chess club", k=5))


def test_search_never_leaves_the_group(service: Epimem, group_id: str) -> None:
    add_topics(service, group_id)
    add_topics(service, group_id + "-x")
    for hit in service.search(group_id, "violin lake bread", k=20):
        assert hit.episode.group_id == group_id
    result = service.context(group_id, "violin lake bread", token_budget=500)
    assert result.citations and all(c.episode_id for c in result.citations)
    ours = {e.uuid for e in service.timeline(group_id, limit=100).episodes}
    assert {c.episode_id for c in result.citations} <= ours


def test_window_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="start must be before end"):
        SearchQuery(query="x", start=REF, end=T0)


def test_an_episode_s_cosine_sees_its_late_turns_through_its_messages_centroid(
    make_service: Callable[..., Epimem], group_id: str
) -> None:
    # The episode's own vector is of its first 1,000 characters: the meteor shower comes after them.
    # The window rule keeps the twelve turns in one episode (the scored one would cut at the shift).
    service = make_service(segmentation_method="window")
    start = datetime(2023, 5, 8, 10, tzinfo=UTC)
    cooking = "We spent the whole afternoon cooking a slow tomato sauce with basil, garlic and olive oil for the kids."
    lines = [cooking] * 10 + ["Then we drove to the hills and watched the Perseid meteor shower from our tent."] * 2
    service.add_messages(
        group_id,
        "s",
        [
            {
                "id": str(i),
                "content": text,
                "producer_id": "ana",
                "timestamp": (start + timedelta(minutes=i)).isoformat(),
            }
            for i, text in enumerate(lines)
        ],
    )
    (episode,) = service.flush(group_id, "s")
    query = "meteor shower camping trip"
    group = service.read_model.reader(group_id)
    rows = episode_rows(group, [episode.uuid])
    vector = unit(service.embedder.embed_query(query))
    keyword = keyword_index(group).scores(query)
    request = understand(group, ContextQuery(query=query), ScoringPolicy())
    own = scored_rows(rows, vector, keyword, request, ScoringPolicy(episode_centroid=0.0))
    blended = scored_rows(rows, vector, keyword, request, ScoringPolicy(episode_centroid=0.5))
    gain = blended - own
    # every turn takes its episode's better cosine (episode_share 0.8 of a gain over 0.05), and only that changes
    assert len(rows) == 12 and gain.min() > 0.8 * 0.05
    assert float(gain.max() - gain.min()) < 1e-9


def test_a_question_naming_the_wrong_person_can_still_reach_what_the_other_said(service: Epimem, group_id: str) -> None:
    # LoCoMo's adversarial questions: "What did Ana realise after her charity race?" when Ben ran it.
    texts = [
        "I finally finished the charity race and realised self-care really matters.",  # Ben
        "My garden is full of tomatoes this year.",  # Ana
        "We should plan a picnic by the river soon.",  # Ben
        "I repainted the kitchen a pale green colour.",  # Ana
    ]
    batch = messages(len(texts), prefix="m", start=T0, text=texts, speakers=("Ben", "Ana"))
    service.add_messages(group_id, "s", batch)
    episodes = service.flush(group_id, "s")
    group = service.read_model.reader(group_id)
    rows = episode_rows(group, [e.uuid for e in episodes])
    query = "What did Ana realise after the charity race?"
    vector = unit(service.embedder.embed_query(query))
    keyword = keyword_index(group).scores(query)
    request = understand(group, ContextQuery(query=query), ScoringPolicy())
    assert request.analysis.named == {"ana"}
    speakers = [str(s).casefold() for s in rows.speakers]
    assert speakers == ["ben", "ana", "ben", "ana"]
    bonus = ScoringPolicy().speaker_bonus
    before = scored_rows(rows, vector, keyword, request, ScoringPolicy())
    without = scored_rows(rows, vector, keyword, request, ScoringPolicy(speaker_bonus=0.0))
    assert list(before - without) == pytest.approx([0.0, bonus, 0.0, bonus])  # the prior: Ana's turns only
    assert int(without.argmax()) == 0  # yet Ben's turn is the one that matches
    # the cap: the bonus also for what outscores every one of Ana's turns (Ben's race), by more than its margin
    capped = scored_rows(rows, vector, keyword, request, ScoringPolicy(speaker_cap=True))
    assert list(capped - before) == pytest.approx([bonus, 0.0, 0.0, 0.0])
    lead = float(without[0] - max(without[1], without[3]))  # Ben's race over Ana's best turn
    assert lead > 0.05
    wide = ScoringPolicy(speaker_cap=True, speaker_cap_margin=lead + 0.01)
    assert list(scored_rows(rows, vector, keyword, request, wide)) == pytest.approx(list(before))
