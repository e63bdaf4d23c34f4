"""Timelines: a group's or session's episodes in event-time order, paged by a stable cursor.

The cursor names the last item returned by (timestamp, uuid); the next page holds the items
strictly after it in that order, so episodes that arrive meanwhile never make a page skip or
repeat an item.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from memory.errors import InvalidInputError
from memory.store import ChromaStore, episode_from_record, where_all
from memory.timeutil import to_epoch
from retrieval.search import EPISODE_KINDS, resolve_window
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
    store: ChromaStore,
    group_id: str,
    *,
    session_id: str | None = None,
    scope: Scope | None = None,
    limit: int = 50,
    cursor: str | None = None,
    direction: Direction = Direction.ASC,
) -> TimelinePage:
    scope = scope or Scope()
    window = resolve_window(scope)
    clauses: list[dict[str, Any]] = [{"kind": {"$in": list(EPISODE_KINDS)}}]
    if window.start is not None:
        clauses.append({"ts": {"$gte": to_epoch(window.start)}})
    if window.end is not None:
        clauses.append({"ts": {"$lt": to_epoch(window.end)}})
    after: tuple[float, str] | None = decode_cursor(cursor) if cursor else None
    if after is not None:
        clauses.append({"ts": {"$gte": after[0]} if direction is Direction.ASC else {"$lte": after[0]}})
    if session_id is None and scope.session_ids is not None:
        clauses.append({"session_id": {"$in": list(scope.session_ids)}})
    records = store.get_vectors(group_id, session_id=session_id, where=where_all(clauses))
    keyed = sorted(
        ((float(record.metadata["ts"]), record.id, record) for record in records),
        key=lambda item: (item[0], item[1]),
        reverse=direction is Direction.DESC,
    )
    if after is not None:
        if direction is Direction.ASC:
            keyed = [item for item in keyed if (item[0], item[1]) > after]
        else:
            keyed = [item for item in keyed if (item[0], item[1]) < after]
    page = keyed[:limit]
    episodes = [episode_from_record(record.document, record.metadata) for _, _, record in page]
    next_cursor = encode_cursor(page[-1][0], page[-1][1]) if len(keyed) > limit else None
    return TimelinePage(episodes=episodes, next_cursor=next_cursor)
