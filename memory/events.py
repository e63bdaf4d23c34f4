"""Change events: what the write path says happened to memory, for whoever listens (the webhook outbox,
memory.webhooks). An event names ids, never content: no text, title or metadata of a message or an
episode, so an event about a deletion or a redaction carries nothing of what was removed.

The write path (``MemoryService``, the ingestor's formation) calls ``EventPublisher.publish`` after the
change has happened. A publisher must not fail the change it reports: it logs and counts its own
failures (the change stands, as with the audit trail).
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from memory.models import UtcDatetime
from memory.receipts import DeletionReceipt, RedactionReceipt
from memory.timeutil import from_epoch

FORMATION_ACTOR = "formation"  # who forms episodes: the write path itself, whoever added the messages
MAX_IDS = 500  # ids of one kind per event: a larger change is published as several events, in order


class ChangeType(StrEnum):
    MESSAGES_ADDED = "messages.added"
    EPISODES_FORMED = "episodes.formed"
    EPISODE_CORRECTED = "episode.corrected"
    MESSAGE_REDACTED = "message.redacted"
    MESSAGE_DELETED = "message.deleted"
    EPISODE_DELETED = "episode.deleted"
    SESSION_DELETED = "session.deleted"
    GROUP_DELETED = "group.deleted"
    SUMMARIES_CREATED = "summaries.created"
    RETENTION_SWEPT = "retention.swept"
    GROUP_IMPORTED = "group.imported"


class ChangeIds(BaseModel):
    """The ids a change touched, by kind (each list at most ``MAX_IDS``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: list[str] = Field(default_factory=list, description="messages added, redacted or removed")
    episodes: list[str] = Field(default_factory=list, description="episodes formed, corrected or removed")
    summaries: list[str] = Field(default_factory=list, description="summaries created or removed")
    sessions: list[str] = Field(default_factory=list, description="sessions removed, imported or swept")
    repaired: list[str] = Field(default_factory=list, description="episodes and summaries rebuilt from what remained")


class ChangeEvent(BaseModel):
    """One change of a group's memory; ``id`` sorts in the order the events were published."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="unique; events sort by it in the order a server published them")
    type: ChangeType
    group_id: str
    session_id: str | None = None
    time: UtcDatetime = Field(description="when the change happened")
    actor: str = Field(description="the API key's name or id ('local' in local mode, 'retention' for sweeps)")
    ids: ChangeIds
    part: int = Field(default=1, description="a change with more ids than fit one event is sent in parts")
    parts: int = 1


class EventPublisher(Protocol):
    def publish(self, events: Sequence[ChangeEvent]) -> None: ...

    def wants(self, group_id: str) -> bool:
        """Whether anyone listens to the group's events (when nobody does, order needs no waiting)."""
        ...


class NoEvents:
    """No listener: nothing is published."""

    def publish(self, events: Sequence[ChangeEvent]) -> None:
        return None

    def wants(self, group_id: str) -> bool:
        return False


NO_EVENTS = NoEvents()


class SessionOrder:
    """The publisher the write path calls: events go on to ``publisher``, each session's in the order of its
    changes (within this process). Formation does not wait for adds: it may take messages that an add has
    stored and not announced yet. So an add counts as in flight (``adding``) from before it stores its
    messages until its event is published, and the events of a formation of the session wait for the adds
    in flight when they are published (at most ``wait_s``; adds never wait)."""

    def __init__(self, publisher: EventPublisher = NO_EVENTS, *, wait_s: float = 10.0) -> None:
        self.publisher = publisher
        self._wait_s = wait_s
        self._changed = threading.Condition()
        self._in_flight: dict[tuple[str, str], set[int]] = {}
        self._tokens = itertools.count()
        self.waiting = 0  # publications waiting for adds now

    @contextmanager
    def adding(self, group_id: str, session_ids: Iterable[str]) -> Iterator[None]:
        keys = [(group_id, session_id) for session_id in session_ids]
        token = next(self._tokens)
        with self._changed:
            for key in keys:
                self._in_flight.setdefault(key, set()).add(token)
        try:
            yield
        finally:
            with self._changed:
                for key in keys:
                    tokens = self._in_flight[key]
                    tokens.discard(token)
                    if not tokens:
                        del self._in_flight[key]
                self._changed.notify_all()

    def publish(self, events: Sequence[ChangeEvent]) -> None:
        formed = [(e.group_id, e.session_id) for e in events if e.type is ChangeType.EPISODES_FORMED and e.session_id]
        keys = {(group, session) for group, session in formed if session and self.publisher.wants(group)}
        with self._changed:
            before = set().union(*(self._in_flight.get(key, set()) for key in keys)) if keys else set()
            if before:
                self.waiting += 1
                self._changed.wait_for(
                    lambda: not any(before & self._in_flight.get(key, set()) for key in keys), timeout=self._wait_s
                )
                self.waiting -= 1
        self.publisher.publish(events)

    def wants(self, group_id: str) -> bool:
        return self.publisher.wants(group_id)


_last = 0
_order = threading.Lock()


def _event_id() -> tuple[str, float]:
    """A unique id that sorts after every id this process made before (and by time across processes)."""
    global _last
    with _order:
        _last = max(time.time_ns(), _last + 1)
        now = _last
    return f"{now:020d}-{secrets.token_hex(4)}", now / 1e9


def change(
    kind: ChangeType,
    group_id: str,
    *,
    actor: str,
    session_id: str | None = None,
    messages: Iterable[str] = (),
    episodes: Iterable[str] = (),
    summaries: Iterable[str] = (),
    sessions: Iterable[str] = (),
    repaired: Iterable[str] = (),
) -> list[ChangeEvent]:
    """The events of one change: one, or several parts when a kind has more than ``MAX_IDS`` ids."""
    lists = {
        "messages": list(dict.fromkeys(messages)),
        "episodes": list(dict.fromkeys(episodes)),
        "summaries": list(dict.fromkeys(summaries)),
        "sessions": list(dict.fromkeys(sessions)),
        "repaired": list(dict.fromkeys(repaired)),
    }
    parts = max(1, *((len(ids) + MAX_IDS - 1) // MAX_IDS for ids in lists.values()))
    events = []
    for part in range(parts):
        window = slice(part * MAX_IDS, (part + 1) * MAX_IDS)
        event_id, at = _event_id()
        events.append(
            ChangeEvent(
                id=event_id,
                type=kind,
                group_id=group_id,
                session_id=session_id,
                time=from_epoch(at),
                actor=actor,
                ids=ChangeIds(**{name: ids[window] for name, ids in lists.items()}),
                part=part + 1,
                parts=parts,
            )
        )
    return events


def removal(
    kind: ChangeType, group_id: str, session_id: str | None, receipt: DeletionReceipt, actor: str
) -> list[ChangeEvent]:
    """The events of a delete: what its receipt says was removed and rebuilt."""
    return change(
        kind,
        group_id,
        actor=actor,
        session_id=session_id,
        messages=receipt.messages,
        episodes=receipt.episodes,
        summaries=receipt.summaries,
        sessions=[session_id] if kind is ChangeType.SESSION_DELETED and session_id else [],
        repaired=receipt.repaired,
    )


def redacted(group_id: str, session_id: str, receipt: RedactionReceipt, actor: str) -> list[ChangeEvent]:
    repaired = [*receipt.episodes, *receipt.summaries]
    kind = ChangeType.MESSAGE_REDACTED
    return change(kind, group_id, actor=actor, session_id=session_id, messages=[receipt.message_id], repaired=repaired)
