"""What a scope selects: its time window (absolute bounds and the words of ``time`` together) and the
record filter the store applies (sessions, kinds, times)."""

from __future__ import annotations

from memory.store.records import RecordFilter, RecordKind
from memory.timeutil import to_epoch
from retrieval.timewindow import TimeWindow, parse_time_window
from retrieval.types import Scope


def resolve_window(scope: Scope) -> TimeWindow:
    """Intersect the absolute window with the natural-language one."""
    start, end = scope.start, scope.end
    if scope.time:
        window = parse_time_window(scope.time, reference=scope.reference_time, timezone=scope.timezone)
        if window.start is not None:
            start = max(start, window.start) if start else window.start
        if window.end is not None:
            end = min(end, window.end) if end else window.end
    return TimeWindow(start=start, end=end)


def scope_filter(
    scope: Scope, window: TimeWindow | None = None, *, kinds: tuple[RecordKind, ...] | None = None
) -> RecordFilter:
    """The records of a scope: its sessions and time window (``resolve_window(scope)`` unless given)."""
    window = window if window is not None else resolve_window(scope)
    return RecordFilter(
        kinds=kinds,
        session_ids=tuple(scope.session_ids) if scope.session_ids is not None else None,
        since=to_epoch(window.start) if window.start is not None else None,
        before=to_epoch(window.end) if window.end is not None else None,
    )
