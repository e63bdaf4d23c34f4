"""The names learned from a group's messages (retrieval.names), kept with its read snapshot and patched:
a write that only adds messages after the last one (the common case: a turn of a live conversation)
feeds the new messages to the kept fold instead of learning from every message of the group again
(250 ms a version at 60,000 messages). Anything else (a removal, a rewritten message, a message
dated before the last one, a new speaker) learns again from all of them. Also the group's speakers
(``GroupSpeakers``, patched the same way) and its names merged with those its configuration sets."""

from __future__ import annotations

import numpy as np

from memory.readmodel.patch import Patch
from memory.readmodel.snapshot import KIND_CODE, GroupSnapshot
from memory.store.records import RecordKind
from retrieval.names import NameLearner, configured_names, merge_names

MESSAGE = KIND_CODE[RecordKind.MESSAGE.value]
LEARNED_NAMES = "learned-names"  # its key among the snapshot's derived structures


class LearnedNames:
    """speaker id (casefolded) -> names learned from the snapshot's messages in time order (``names``)."""

    fed = 0  # the messages this value read: all of them when learned anew, the new ones when patched

    def __init__(self, snapshot: GroupSnapshot, learner: NameLearner | None = None, last: float = -np.inf) -> None:
        if learner is None:
            rows = np.flatnonzero(snapshot.kinds == MESSAGE)
            rows = rows[np.argsort(snapshot.timestamps[rows], kind="stable")]
            learner = NameLearner({p for p in (snapshot.producers[int(r)].casefold() for r in rows) if p})
            learner.feed(_triples(snapshot, rows))
            last = float(snapshot.timestamps[rows].max()) if len(rows) else -np.inf
            self.fed = len(rows)
        self._learner = learner
        self.last = last  # the time of the last message fed
        self.names = learner.names()

    def patched(self, snapshot: GroupSnapshot, patch: Patch, previous: GroupSnapshot) -> LearnedNames:
        """These names for ``snapshot``, patched from ``previous`` (memory.readmodel.patch.Patch)."""
        old_of_new = patch.old_of_new
        new_messages = np.flatnonzero((old_of_new < 0) & (snapshot.kinds == MESSAGE))
        kept = np.flatnonzero((old_of_new >= 0) & (snapshot.kinds == MESSAGE))
        before = old_of_new[kept]
        rewritten = [int(p) for p in patch.rewritten if old_of_new[p] >= 0 and snapshot.kinds[p] == MESSAGE]
        unchanged = (
            len(kept) == int(np.count_nonzero(previous.kinds == MESSAGE))  # no message removed or made another kind
            and bool(np.all(np.diff(before) > 0))  # in the same order (ties in time keep it)
            and np.array_equal(snapshot.timestamps[kept], previous.timestamps[before])
            # What the names read of a message changes only where the patch rewrote a record.
            and all(_triple(snapshot, int(p)) == _triple(previous, int(old_of_new[p])) for p in rewritten)
        )
        if not unchanged or not len(new_messages):
            return self if unchanged else LearnedNames(snapshot)
        times = snapshot.timestamps[new_messages]
        speakers = {snapshot.producers[int(r)].casefold() for r in new_messages} - {""}
        if float(times.min()) <= self.last or not speakers <= self._learner.people:
            return LearnedNames(snapshot)
        learner = self._learner.copy()
        rows = new_messages[np.argsort(times, kind="stable")]
        learner.feed(_triples(snapshot, rows))
        patched = LearnedNames(snapshot, learner, float(times.max()))
        patched.fed = len(rows)
        return patched


def _triple(snapshot: GroupSnapshot, row: int) -> tuple[str, str, str]:
    return snapshot.producers[row], snapshot.produced_for[row], snapshot.documents[row]


def _triples(snapshot: GroupSnapshot, rows: np.ndarray) -> list[tuple[str, str, str]]:
    return [
        (snapshot.producers[r].casefold(), snapshot.produced_for[r].casefold(), snapshot.documents[r])
        for r in (int(row) for row in rows)
    ]


class GroupSpeakers:
    """The group's speakers, kept with its snapshot; patched when a write only added records (the next
    version's are these and the new messages' speakers), read again otherwise."""

    def __init__(self, snapshot: GroupSnapshot, names: frozenset[str] | None = None) -> None:
        self.names = names if names is not None else _speakers(snapshot)

    def patched(self, snapshot: GroupSnapshot, patch: Patch, previous: GroupSnapshot) -> GroupSpeakers:
        kept = patch.old_of_new >= 0
        if len(patch.rewritten) or int(np.count_nonzero(kept)) != len(previous):
            return GroupSpeakers(snapshot)
        return GroupSpeakers(snapshot, self.names | _speakers(snapshot, np.flatnonzero(~kept)))


def _speakers(snapshot: GroupSnapshot, rows: np.ndarray | None = None) -> frozenset[str]:
    """The speakers of the group's messages, or of those among ``rows`` (casefolded: a message's producer
    id, else its role); a group too large to keep its messages knows them by producer id."""
    kept = snapshot.messages
    if kept is not None and rows is None:
        return frozenset(message.speaker.casefold() for message in kept.values())
    positions = np.flatnonzero(snapshot.kinds == MESSAGE) if rows is None else rows[snapshot.kinds[rows] == MESSAGE]
    if kept is not None:
        found = (kept.get(snapshot.ids[p]) for p in positions.tolist())
        return frozenset(message.speaker.casefold() for message in found if message is not None)
    names = {snapshot.producers[p] for p in positions.tolist()}  # interned: a handful of distinct strings
    return frozenset(name.casefold() for name in names if name)


def group_speaker_names(snapshot: GroupSnapshot, learned: dict[str, set[str]]) -> dict[str, set[str]]:
    """Names learned from the group's messages (retrieval.speaker_names) merged with those its
    configuration and sessions set."""
    config = snapshot.config
    metadata = ([config.metadata] if config else []) + [s.metadata for s in snapshot.sessions]
    return merge_names(learned, configured_names(metadata))
