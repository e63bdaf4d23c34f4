"""Messages not in an episode yet, as the read path shows them: one *open episode* per session.

A message is recallable from the moment its add is acknowledged. Until its segment closes and the
episode is written, its vector record names the session's open episode id
(``memory.store.records.open_episode_id``); the read path gathers those records of a group's snapshot
into one provisional ``Episode`` per session (boundary reason ``open``, the messages verbatim as its
content), scored like any other episode and marked ``pending`` in search hits and context citations.
Nothing here is stored: formation replaces it with the real episodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from memory.episodes.offline import offline_title
from memory.models import BoundaryReason, Episode, GenerationMethod, Message, Segment
from memory.readmodel.snapshot import KIND_CODE, GroupSnapshot
from memory.store.protocols import LogReader
from memory.store.records import RecordKind, is_open_episode_id, message_record_id, open_episode_id
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
    return is_open_episode_id(episode.uuid)


__all__ = ["OPEN_TITLE_PREFIX", "is_open_episode_id", "is_pending", "open_episode", "open_episodes"]


def open_episodes(snapshot: GroupSnapshot, log: LogReader) -> dict[str, Episode]:
    """Open episode id -> the open episode of each session of the group with pending messages."""
    code = KIND_CODE[RecordKind.MESSAGE.value]
    wanted: dict[str, list[str]] = defaultdict(list)
    for position in np.flatnonzero(snapshot.kinds == code):
        if is_open_episode_id(snapshot.episode_ids[position]):
            session = snapshot.session_names[int(snapshot.session_codes[position])]
            wanted[session].append(snapshot.message_ids[position])
    if not wanted:
        return {}
    found = _messages(snapshot, log, wanted)
    return {
        open_episode_id(session): open_episode(snapshot.group_id, session, messages)
        for session, messages in found.items()
        if messages
    }


def _messages(snapshot: GroupSnapshot, log: LogReader, wanted: Mapping[str, list[str]]) -> dict[str, list[Message]]:
    """The messages the log holds of those ids (a vector written just before its log record is
    left out until the log record lands: that write changes the group's version)."""
    if snapshot.messages is not None:
        kept = snapshot.messages
        return {
            session: [m for i in ids if (m := kept.get(message_record_id(session, i))) is not None]
            for session, ids in wanted.items()
        }
    stored = log.get_messages_of_sessions(snapshot.group_id, wanted)
    return {
        session: [stored[session][i].message for i in ids if i in stored.get(session, {})]
        for session, ids in wanted.items()
    }
