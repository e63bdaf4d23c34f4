"""The names learned from a group's messages (retrieval.names), kept with its version in the read model and
patched: a write that only adds messages after the last one (the common case: a turn of a live
conversation) feeds the new messages to the kept fold instead of learning from every message of the group
again (250 ms a version at 60,000 messages). Anything else (a removal, a rewritten message, a message
dated before the last one, a new speaker) learns again from all of them. Also the group's names merged with
those its configuration sets (``speaker_names``)."""

from __future__ import annotations

import numpy as np

from memory.readmodel.patch import Patch
from memory.readmodel.reader import KIND_CODE, Columns, Derivation, GroupReader
from memory.store.records import RecordKind
from retrieval.names import NameLearner, configured_names, merge_names

MESSAGE = KIND_CODE[RecordKind.MESSAGE.value]


class LearnedNames:
    """speaker id (casefolded) -> names learned from the snapshot's messages in time order (``names``)."""

    fed = 0  # the messages this value read: all of them when learned anew, the new ones when patched

    def __init__(self, snapshot: Columns, learner: NameLearner | None = None, last: float = -np.inf) -> None:
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

    def patched(self, snapshot: Columns, patch: Patch, previous: Columns) -> LearnedNames:
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


def _triple(snapshot: Columns, row: int) -> tuple[str, str, str]:
    return snapshot.producers[row], snapshot.produced_for[row], snapshot.documents[row]


def _triples(snapshot: Columns, rows: np.ndarray) -> list[tuple[str, str, str]]:
    return [
        (snapshot.producers[r].casefold(), snapshot.produced_for[r].casefold(), snapshot.documents[r])
        for r in (int(row) for row in rows)
    ]


class Learned(Derivation[LearnedNames]):
    key = "learned-names"

    def build(self, group: GroupReader) -> LearnedNames:
        return LearnedNames(group.columns)

    def patched(self, value: LearnedNames, columns: Columns, patch: Patch, previous: Columns) -> LearnedNames:
        return value.patched(columns, patch, previous)


class SpeakerNames(Derivation[dict[str, set[str]]]):
    """Speaker id (casefolded) -> its other names (casefolded): set in the group's or a session's metadata,
    or learned from how the others address it (retrieval.names)."""

    key = "speaker-names"

    def build(self, group: GroupReader) -> dict[str, set[str]]:
        return group_speaker_names(group, group.derived(LEARNED_NAMES).names)


LEARNED_NAMES = Learned()
SPEAKER_NAMES = SpeakerNames()


def speaker_names(group: GroupReader) -> dict[str, set[str]]:
    """The group's speakers' other names, kept with its version and read again when the group changes."""
    return group.derived(SPEAKER_NAMES)


def group_speaker_names(group: GroupReader, learned: dict[str, set[str]]) -> dict[str, set[str]]:
    """Names learned from the group's messages merged with those its configuration and sessions set."""
    config = group.config
    metadata = ([config.metadata] if config else []) + [s.metadata for s in group.sessions]
    return merge_names(learned, configured_names(metadata))
