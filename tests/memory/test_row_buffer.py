"""Arrays grown at their end in place (memory.readmodel.row_buffer): what a snapshot or an index handed out
before an append keeps seeing, and when an append must copy."""

from __future__ import annotations

import numpy as np

from memory.readmodel.row_buffer import appended, grown


def test_an_append_leaves_the_earlier_views_as_they_were() -> None:
    first, buffer = grown(np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32))
    second, same = appended(first, buffer, np.full((1, 3), 2, np.float32))
    assert same is buffer and np.shares_memory(first, second)  # no copy
    assert first.shape == (2, 3) and np.array_equal(first, np.ones((2, 3)))
    assert second.shape == (3, 3) and np.array_equal(second[2], [2, 2, 2])


def test_two_appends_after_the_same_view_do_not_write_over_each_other() -> None:
    """Two snapshots patched from the same one: the second append copies."""
    base, buffer = grown(np.arange(4, dtype=np.int32), np.arange(4, 6, dtype=np.int32))
    one, _ = appended(base, buffer, np.asarray([10], dtype=np.int32))
    other, copied = appended(base, buffer, np.asarray([20], dtype=np.int32))
    assert copied is not buffer and not np.shares_memory(one, other)
    assert one.tolist() == [0, 1, 2, 3, 4, 5, 10] and other.tolist() == [0, 1, 2, 3, 4, 5, 20]


def test_a_full_buffer_grows_into_a_new_one() -> None:
    rows, buffer = grown(np.zeros(0, np.float32), np.zeros(10, np.float32))
    capacity = len(buffer.data)
    rows, buffer2 = appended(rows, buffer, np.ones(capacity - 10, np.float32))  # fills it exactly
    assert buffer2 is buffer and len(rows) == capacity
    more, buffer3 = appended(rows, buffer2, np.ones(1, np.float32))
    assert buffer3 is not buffer and len(more) == capacity + 1 and len(buffer3.data) > capacity + 1
    assert more[:10].sum() == 0 and more[10:].sum() == capacity - 9
