"""Arrays that grow at their end without a copy per write: the read snapshot's unit vectors and the
keyword index's postings gain a few rows per write, and copying all of them each time cost more than
the rest of the write's patch (~100 MB for the vectors of a group of 60,000 records)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class RowBuffer:
    """Rows with room after the last one. Appending writes the new rows there and hands out a longer
    view: the views handed out before keep their length and their rows, as no row they see is written."""

    data: np.ndarray  # capacity x the rows' shape
    used: int  # rows some view holds: a later append must not write over them
    lock: threading.Lock = field(default_factory=threading.Lock)

    def appended(self, viewed: int, rows: np.ndarray) -> np.ndarray | None:
        """The first ``viewed`` rows and ``rows`` after them; None when another view already took the room
        after them, or there is not enough of it."""
        end = viewed + len(rows)
        with self.lock:
            if viewed != self.used or end > len(self.data) or rows.shape[1:] != self.data.shape[1:]:
                return None
            self.data[viewed:end] = rows
            self.used = end
        return self.data[:end]


def grown(existing: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, RowBuffer]:
    """``existing`` and ``rows`` after them, copied into a new buffer with a quarter more room."""
    total = len(existing) + len(rows)
    shape = rows.shape[1:] if len(rows) or not len(existing) else existing.shape[1:]
    data = np.empty((total + total // 4 + 64, *shape), dtype=existing.dtype if len(existing) else rows.dtype)
    if len(existing):
        data[: len(existing)] = existing
    data[len(existing) : total] = rows
    return data[:total], RowBuffer(data, total)


def appended(existing: np.ndarray, buffer: RowBuffer | None, rows: np.ndarray) -> tuple[np.ndarray, RowBuffer]:
    """``existing`` (a view of ``buffer``, if any) with ``rows`` after it: in place when the buffer has
    room after it that no other view took, else in a new buffer."""
    found = buffer.appended(len(existing), rows) if buffer is not None else None
    if found is not None and buffer is not None:
        return found, buffer
    return grown(existing, rows)
