"""Messages not in an episode yet, as a reader sees them: one *open episode* per session.

A message is recallable from the moment its add is acknowledged. Until its segment closes and the
episode is written, its vector record names the session's open episode id
(``memory.store.records.open_episode_id``); the read model gathers those records of a group into one
provisional ``Episode`` per session (boundary reason ``open``, the messages verbatim as its content),
which the read path scores like any other episode and marks ``pending``. Nothing here is stored:
formation replaces it with the real episodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from memory.episodes.offline import offline_title
from memory.models import BoundaryReason, Episode, GenerationMethod, Message, Segment
from memory.readmodel.reader import Derivation, GroupReader
from memory.readmodel.snapshot import KIND_CODE
from memory.store.records import RecordKind, is_open_episode_id, open_episode_id
from memory.text import clip, message_line

OPEN_TITLE_PREFIX = "Not yet an episode — "
OPEN_CONTENT_CHARS = 4000


def open_episode(group_id: str, session_id: str, messages: Sequence[Message]) -> Episode:
    """The provisional episode of a session's pending messages (in event-time order)."""
    ordered = sorted(messages, key=lambda m: m.timestamp)
    segment = Segment(messages=tuple(ordered), boundary_reason=BoundaryReason.OPEN)
    return Episode(
        uuid=open_episode_id(session_id),
        title=OPEN_TITLE_PREFIX + offline_title(segment),
        content=clip("\n".join(message_line(m) for m in ordered), OPEN_CONTENT_CHARS),
        timestamp=ordered[0].timestamp,
        created_at=ordered[-1].timestamp,
        group_id=group_id,
        session_id=session_id,
        source_message_ids=tuple(m.id for m in ordered),
        message_count=len(ordered),
        boundary_reason=BoundaryReason.OPEN,
        generation=GenerationMethod.OFFLINE,
    )


def is_pending(episode: Episode) -> bool:
    """Whether the episode is a session's open episode."""
    return is_open_episode_id(episode.uuid)


class OpenEpisodes(Derivation[dict[str, Episode]]):
    """Open episode id -> the open episode of each session of the group with pending messages (a message's
    vector written just before its log record is left out until the log record lands: that write changes the
    group's version)."""

    key = "open-episodes"

    def build(self, group: GroupReader) -> dict[str, Episode]:
        columns = group.columns
        code = KIND_CODE[RecordKind.MESSAGE.value]
        wanted: dict[str, list[str]] = defaultdict(list)
        for position in np.flatnonzero(columns.kinds == code):
            if is_open_episode_id(columns.episode_ids[position]):
                session = columns.session_names[int(columns.session_codes[position])]
                wanted[session].append(columns.message_ids[position])
        if not wanted:
            return {}
        found = group.session_messages(wanted)
        return {
            open_episode_id(session): open_episode(group.group_id, session, list(messages.values()))
            for session, messages in found.items()
            if messages
        }
