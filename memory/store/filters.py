"""The scope a reader describes its records with, in the store's own terms: record kinds and the filter
(``memory.store.codec`` turns it into Chroma's ``where``; ``memory.store.records`` hands it out)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from memory.models import EpisodeType


class RecordKind(StrEnum):
    """What a vector record is: an episode, a summary (both ``Episode`` models) or one message."""

    EPISODE = EpisodeType.EPISODE.value
    SUMMARY = EpisodeType.SUMMARY.value
    MESSAGE = "message"


EPISODE_KINDS = (RecordKind.EPISODE, RecordKind.SUMMARY)


@dataclass(frozen=True)
class RecordFilter:
    """Which vector records of a group to read.

    ``session_ids``: only these sessions (exactly one = that session's partition is read instead of
    the group index); ``kinds``: only these record kinds; the event time (epoch seconds) ``>= since``,
    ``< before`` and ``<= until``. Unset fields do not filter.
    """

    kinds: tuple[RecordKind, ...] | None = None
    session_ids: tuple[str, ...] | None = None
    since: float | None = None
    before: float | None = None
    until: float | None = None

    @property
    def single_session(self) -> str | None:
        return self.session_ids[0] if self.session_ids is not None and len(self.session_ids) == 1 else None
