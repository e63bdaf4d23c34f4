"""A group's speakers (``GroupReader.speakers``), kept with its version: carried to the next version when a
write only added records or rewrote some without changing their speakers (those before and the new messages'),
read again otherwise."""

from __future__ import annotations

import numpy as np

from memory.readmodel.patch import Patch
from memory.readmodel.reader import Columns, Derivation, GroupReader
from memory.readmodel.snapshot import KIND_CODE, GroupSnapshot
from memory.store.records import RecordKind

MESSAGE = KIND_CODE[RecordKind.MESSAGE.value]


class Speakers(Derivation[frozenset[str]]):
    """The speakers of the group's messages (casefolded: a message's producer id, else its role); a group
    too large to keep its messages knows them by producer id."""

    key = "speakers"

    def build(self, group: GroupReader) -> frozenset[str]:
        return _speakers(group.columns)

    def patched(self, value: frozenset[str], columns: Columns, patch: Patch, previous: Columns) -> frozenset[str]:
        kept = patch.old_of_new >= 0
        if int(np.count_nonzero(kept)) != len(previous) or not _same_speakers(columns, patch, previous):
            return _speakers(columns)
        return value | _speakers(columns, np.flatnonzero(~kept))


def _same_speakers(columns: Columns, patch: Patch, previous: Columns) -> bool:
    """Whether every rewritten row is what it was and names the speaker it named (a formation only names the
    episode of its messages): then no speaker went, and the group's are those before and the new rows'."""
    assert isinstance(columns, GroupSnapshot) and isinstance(previous, GroupSnapshot)
    for row in patch.rewritten.tolist():
        old = int(patch.old_of_new[row])
        if columns.kinds[row] != previous.kinds[old] or columns.producers[row] != previous.producers[old]:
            return False
        if columns.kinds[row] == MESSAGE and columns.messages is not None and previous.messages is not None:
            now, before = columns.messages.get(columns.ids[row]), previous.messages.get(previous.ids[old])
            if (now is None) != (before is None) or (now and before and now.speaker != before.speaker):
                return False
    return True


def _speakers(columns: Columns, rows: np.ndarray | None = None) -> frozenset[str]:
    """The speakers of the group's messages, or of those among ``rows``."""
    assert isinstance(columns, GroupSnapshot)  # the read model's own columns: its messages, when it keeps them
    kept = columns.messages
    if kept is not None and rows is None:
        return frozenset(message.speaker.casefold() for message in kept.values())
    positions = np.flatnonzero(columns.kinds == MESSAGE) if rows is None else rows[columns.kinds[rows] == MESSAGE]
    if kept is not None:
        found = (kept.get(columns.ids[p]) for p in positions.tolist())
        return frozenset(message.speaker.casefold() for message in found if message is not None)
    names = {columns.producers[p] for p in positions.tolist()}  # interned: a handful of distinct strings
    return frozenset(name.casefold() for name in names if name)
