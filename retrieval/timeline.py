"""Timelines: a group's or session's episodes in event-time order, paged by a stable cursor.

A session's pending messages (stored and recallable, not in an episode yet) take part as its open
episode (memory.readmodel.open_episodes), at the time of its first message and named in the page's ``pending``: the
timeline shows what was said, as search and context do.

The cursor (``memory.pages``) names the last item returned by (timestamp, uuid); the next page holds the items
strictly after it in that order, so episodes that arrive meanwhile never make a page skip or
repeat an item. Among items of the same time an open episode comes last, in either direction: the
episodes its messages form (at the time of their first message) then fall before a cursor that passed it,
and are not shown a second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from memory.models import Episode
from memory.pages import decode_cursor, encode_cursor
from memory.store.protocols import VectorReader
from memory.store.records import EPISODE_KINDS, RecordFilter, is_open_episode_id
from memory.timeutil import to_epoch
from retrieval.scope import scope_filter
from retrieval.types import Direction, Scope, TimelinePage

OrderKey = tuple[float, bool, str]
TIMELINE_KEY = (float, str)  # the cursor: the last episode's time (epoch seconds) and id (memory.pages)


def order_key(timestamp: float, episode_id: str, direction: Direction) -> OrderKey:
    """Where an item stands in the page order (sorted ascending for ``asc``, descending for ``desc``): by
    time, then an open episode after the others of its time, then by id."""
    opened = is_open_episode_id(episode_id)
    return timestamp, opened if direction is Direction.ASC else not opened, episode_id


def in_selection(episode: Episode, selection: RecordFilter) -> bool:
    """Whether an episode that has no record (an open episode) falls in a record filter's sessions and times."""
    ts = to_epoch(episode.timestamp)
    return (
        (selection.session_ids is None or episode.session_id in selection.session_ids)
        and (selection.since is None or ts >= selection.since)
        and (selection.before is None or ts < selection.before)
        and (selection.until is None or ts <= selection.until)
    )


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
    open_episodes: Iterable[Episode] = (),
) -> TimelinePage:
    """``passing``: the episodes a filter lets pass among those given, by id, as it shows them (retrieval.filters);
    ``open_episodes``: the group's open episodes (``GroupReader.open_episodes``), shown where the scope holds them."""
    scope = scope or Scope()
    if session_id is not None:
        scope = scope.model_copy(update={"session_ids": [session_id]})
    selection = scope_filter(scope, kinds=EPISODE_KINDS)
    after: OrderKey | None = None
    if cursor:
        time, episode_id = decode_cursor(cursor, TIMELINE_KEY, "timeline")
        timestamp = float(time)
        after = order_key(timestamp, str(episode_id), direction)
        # the cursor's own time again: ties are told apart below
        if direction is Direction.ASC:
            selection = replace(selection, since=max(timestamp, selection.since or timestamp))
        else:
            selection = replace(selection, until=timestamp)
    items = [(record.timestamp, record.episode()) for record in vectors.records(group_id, selection=selection)]
    items += [(to_epoch(e.timestamp), e) for e in open_episodes if in_selection(e, selection)]
    if passing is not None:
        shown = passing([episode for _, episode in items])
        items = [(ts, shown[episode.uuid]) for ts, episode in items if episode.uuid in shown]
    descending = direction is Direction.DESC
    keyed = sorted(((order_key(ts, e.uuid, direction), e) for ts, e in items), key=lambda k: k[0], reverse=descending)
    if after is not None:
        keyed = [item for item in keyed if (item[0] < after if descending else item[0] > after)]
    page = keyed[:limit]
    next_cursor = encode_cursor((page[-1][0][0], page[-1][1].uuid)) if len(keyed) > limit else None
    episodes = [episode for _, episode in page]
    return TimelinePage(
        episodes=episodes, next_cursor=next_cursor, pending=[e.uuid for e in episodes if is_open_episode_id(e.uuid)]
    )
