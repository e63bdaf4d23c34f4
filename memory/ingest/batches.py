"""What the write path checks and rebuilds about a batch of messages: ids unique within it, a retry equal
to what was stored, and the segments planned before a crash."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from memory.episodes.generation import GenerationJob
from memory.errors import InvalidInputError
from memory.models import BoundaryReason, Message, MessageState, Segment, StoredMessage


def unique_ids(messages: Sequence[Message]) -> list[str]:
    ids = [message.id for message in messages]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        repeated = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
        raise InvalidInputError("message ids repeat within the batch", details={"ids": repeated[:20]})
    return ids


def same_message(a: Message, b: Message) -> bool:
    """Whether ``b`` (arriving) repeats ``a`` (stored). A message sent without a timestamp is stamped
    by the server on arrival, so a retry of it compares everything but the timestamp."""
    stamped = "timestamp" not in b.model_fields_set
    return (a.content, a.role, a.producer_id, a.produced_for_id) == (
        b.content,
        b.role,
        b.producer_id,
        b.produced_for_id,
    ) and (stamped or a.timestamp == b.timestamp)


def resumed_jobs(group_id: str, session_id: str, unfinished: list[StoredMessage]) -> list[GenerationJob]:
    """Segments planned before a crash (messages in FORMING state), rebuilt exactly."""
    groups: dict[str, list[StoredMessage]] = defaultdict(list)
    for stored in unfinished:
        if stored.state is MessageState.FORMING and stored.episode_id:
            groups[stored.episode_id].append(stored)
    jobs = []
    for episode_id, items in groups.items():
        reason = items[0].boundary_reason or BoundaryReason.FLUSH
        segment = Segment(messages=tuple(s.message for s in items), boundary_reason=reason)
        jobs.append(GenerationJob(segment, group_id, session_id, episode_id))
    return jobs
