"""retrieval.spread: the packing order when what is already packed lowers the rest (issue 29, long chats)."""

from __future__ import annotations

import numpy as np

from retrieval.spread import spread_order

SCORES = [1.0, 0.95, 0.9]


def order(episodes, days, vectors=None, *, redundancy=0.0, day_spread=0.0, refuse=(), **more):
    offered: list[int] = []

    def take(n: int) -> bool:
        offered.append(n)
        return n not in refuse

    packed = spread_order(
        SCORES, episodes, days, vectors, redundancy=redundancy, day_spread=day_spread, take=take, **more
    )
    return offered, packed


def test_without_penalties_the_order_is_the_score_order() -> None:
    assert order(["a", "b", "c"], ["d1", "d1", "d1"]) == ([0, 1, 2], [0, 1, 2])


def test_a_busy_day_yields_to_another_day() -> None:
    assert order(["a", "b", "c"], ["d1", "d1", "d2"], day_spread=0.1)[0] == [0, 2, 1]
    # the lowering is 0.1 per packed message of another episode that day: 0.04 is not enough to pass 0.9
    assert order(["a", "b", "c"], ["d1", "d1", "d2"], day_spread=0.04)[0] == [0, 1, 2]


def test_the_same_episode_is_not_lowered_by_its_own_messages() -> None:
    assert order(["a", "a", "c"], ["d1", "d1", "d2"], day_spread=0.1)[0] == [0, 1, 2]
    same = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    assert order(["a", "a", "c"], ["d1", "d2", "d3"], same, redundancy=0.2)[0] == [0, 1, 2]


def test_a_repeat_of_what_is_packed_yields_to_something_new() -> None:
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    assert order(["a", "b", "c"], ["d1", "d2", "d3"], vectors, redundancy=0.2)[0] == [0, 2, 1]
    assert order(["a", "b", "c"], ["d1", "d2", "d3"], vectors, redundancy=0.04)[0] == [0, 1, 2]


def test_a_message_that_did_not_fit_lowers_nothing() -> None:
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    offered, packed = order(["a", "b", "c"], ["d1", "d2", "d3"], vectors, redundancy=0.2, refuse={0})
    assert offered == [0, 1, 2] and packed == [1, 2]


def test_a_likeness_below_the_floor_does_not_count() -> None:
    # item 1 is at cosine 0.8 with item 0: a floor of 0.7 counts a third of it, one of 0.85 none
    vectors = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]], dtype=np.float32)
    assert order(["a", "b", "c"], ["d1", "d2", "d3"], vectors, redundancy=0.3, floor=0.7)[0] == [0, 2, 1]
    assert order(["a", "b", "c"], ["d1", "d2", "d3"], vectors, redundancy=0.3, floor=0.85)[0] == [0, 1, 2]


def test_more_messages_per_episode_or_longer_ones_are_lowered() -> None:
    assert order(["a", "a", "c"], ["d1", "d1", "d1"], episode_spread=0.1)[0] == [0, 2, 1]
    # 0.95 - 0.1 x 2 (200 characters) falls below 0.9 - 0.1 x 0.2
    assert order(["a", "b", "c"], ["d1"] * 3, lengths=[20, 200, 20], length_penalty=0.1)[0] == [0, 2, 1]


def test_a_restatement_of_an_earlier_message_yields_to_the_original() -> None:
    # item 0 (the best) restates item 2, said earlier in another episode; item 1 is new
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    times = [30.0, 20.0, 10.0]
    assert order(["a", "b", "c"], ["d1"] * 3, vectors, times=times, echo=0.2, echo_floor=0.5)[0] == [1, 2, 0]
    # the original is not lowered by its later restatement, and a likeness inside one episode does not count
    assert order(["a", "b", "a"], ["d1"] * 3, vectors, times=times, echo=0.2, echo_floor=0.5)[0] == [0, 1, 2]
    # below the floor nothing is lowered: cosine 0.8 against a floor of 0.85
    close = np.array([[0.8, 0.6], [0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    assert order(["a", "b", "c"], ["d1"] * 3, close, times=times, echo=0.2, echo_floor=0.85)[0] == [0, 1, 2]


def test_primacy_puts_the_older_of_near_equal_matches_first() -> None:
    # newest first by score; 0.2 x (share older) turns the order round: 1.0 - 0.2, 0.95 - 0.1, 0.9
    assert order(["a", "b", "c"], ["d1"] * 3, times=[30.0, 20.0, 10.0], primacy=0.2)[0] == [2, 1, 0]
    assert order(["a", "b", "c"], ["d1"] * 3, times=[30.0, 20.0, 10.0], primacy=0.02)[0] == [0, 1, 2]
