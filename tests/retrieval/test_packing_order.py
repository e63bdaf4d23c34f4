"""retrieval.packing_order: the order the context's packer is offered messages in."""

from __future__ import annotations

from retrieval.packing_order import packing_order

SCORES = [1.0, 0.95, 0.9]


def test_without_penalties_the_order_is_the_score_order() -> None:
    assert packing_order(SCORES) == [0, 1, 2]
    assert packing_order([0.5, 0.9, 0.5]) == [1, 0, 2]  # ties by position
    assert packing_order([]) == []


def test_a_longer_message_is_lowered() -> None:
    # 0.95 - 0.1 x 2 (200 characters) falls below 0.9 - 0.1 x 0.2
    assert packing_order(SCORES, lengths=[20, 200, 20], length_penalty=0.1) == [0, 2, 1]
    assert packing_order(SCORES, lengths=[20, 200, 20], length_penalty=0.01) == [0, 1, 2]


def test_primacy_puts_the_older_of_near_equal_matches_first() -> None:
    # newest first by score; 0.2 x (share older) turns the order round: 1.0 - 0.2, 0.95 - 0.1, 0.9
    assert packing_order(SCORES, times=[30.0, 20.0, 10.0], primacy=0.2) == [2, 1, 0]
    assert packing_order(SCORES, times=[30.0, 20.0, 10.0], primacy=0.02) == [0, 1, 2]
    assert packing_order([1.0], times=[5.0], primacy=0.2) == [0]  # alone: nothing older
