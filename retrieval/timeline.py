"""Timelines: a group's or session's episodes in event-time order, paged by a stable cursor.

The cursor names the last item returned by (timestamp, uuid); the next page holds the items
strictly after it in that order, so episodes that arrive meanwhile never make a page skip or
repeat an item.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import replace

from memory.errors import InvalidInputError
from memory.models import Episode
from memory.store.protocols import VectorReader
from memory.store.records import EPISODE_KINDS
from retrieval.scope import scope_filter
from retrieval.types import Direction, Scope, TimelinePage


def encode_cursor(timestamp: float, episode_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([timestamp, episode_id]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        timestamp, episode_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return float(timestamp), str(episode_id)
    except (ValueError, TypeError, UnicodeDecodeError) as error:
        raise InvalidInputError("invalid timeline cursor") from error


def timeline(
    vectors: VectorReader,
    group_id: str,
    *,
    session_id: str | None = None,
    scope: Scope | None = None,
    limit: int = 50,
    cursor: str | None = None,
    direction: Direction = Direction.ASC,
    passing: Callable[[list[Episode]], Mapping[str, Episode]] | None = None,
) -> TimelinePage:
    """``passing``: the episodes a filter lets pass among those given, by id, as it shows them (retrieval.filters)."""
    scope = scope or Scope()
    if session_id is not None:
        scope = scope.model_copy(update={"session_ids": [session_id]})
    selection = scope_filter(scope, kinds=EPISODE_KINDS)
    after: tuple[float, str] | None = decode_cursor(cursor) if cursor else None
    if after is not None:  # the cursor's own time again: ties are told apart by id below
        if direction is Direction.ASC:
            selection = replace(selection, since=max(after[0], selection.since or after[0]))
        else:
            selection = replace(selection, until=after[0])
    records = vectors.records(group_id, selection=selection)
    shown: Mapping[str, Episode] = {}
    if passing is not None:
        shown = passing([record.episode() for record in records])
        records = [record for record in records if record.id in shown]
    keyed = sorted(
        ((record.timestamp, record.id, record) for record in records),
        key=lambda item: (item[0], item[1]),
        reverse=direction is Direction.DESC,
    )
    if after is not None:
        if direction is Direction.ASC:
            keyed = [item for item in keyed if (item[0], item[1]) > after]
        else:
            keyed = [item for item in keyed if (item[0], item[1]) < after]
    page = keyed[:limit]
    next_cursor = encode_cursor(page[-1][0], page[-1][1]) if len(keyed) > limit else None
    episodes = [shown.get(record.id) or record.episode() for _, _, record in page]
    return TimelinePage(episodes=episodes, next_cursor=next_cursor)
