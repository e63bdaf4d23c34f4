"""The write path: messages stored durably first, then cut into episodes, embedded and stored.

Episode formation is a three-step write-ahead protocol per segment, so that a crash at any
point neither loses nor duplicates anything:

1. the segment's messages are marked FORMING with the (deterministic) episode id they will get;
2. the episode and the message vectors are written (upsert, idempotent by id);
3. the messages are marked DONE.

After a crash, FORMING messages are regenerated as exactly the planned segment, and PENDING
ones are segmented again.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from memory.embedding.embedder import Embedder
from memory.episodes.generation import EpisodeGenerator, GenerationJob, batch_generate_episodes, episode_id_for
from memory.episodes.segmentation import SegmentationPolicy, Segmenter
from memory.errors import ConflictError, InvalidInputError
from memory.ingest.coordination import Coordinator, LocalCoordinator
from memory.locks import SessionLocks
from memory.models import BoundaryReason, Episode, Message, MessageState, Segment, SessionInfo, StoredMessage
from memory.receipts import AddReceipt
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import VectorRecord
from memory.text import episode_embedding_text, message_line
from memory.timeutil import utc_now
from memory.tracing import span

log = logging.getLogger("epimem.ingest")
MessageVectors = dict[tuple[str, str, str], np.ndarray]  # (group, session, message id) -> vector


@dataclass
class StageTimings:
    """Cumulative seconds per ingest stage (exported as metrics)."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    episodes_created: int = 0

    def snapshot(self) -> StageTimings:
        return StageTimings(seconds=dict(self.seconds), episodes_created=self.episodes_created)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            with span(f"epimem.ingest.{name}"):
                yield
        finally:
            self.seconds[name] += time.perf_counter() - started


class Ingestor:
    def __init__(
        self,
        *,
        log: LogWriter,
        vectors: VectorWriter,
        embedder: Embedder,
        generator: EpisodeGenerator,
        segmenter: Segmenter,
        policy: SegmentationPolicy,
        auto_flush_pending: int = 24,
        coordinator: Coordinator | None = None,
        generation_concurrency: int = 1,
    ) -> None:
        self._log = log
        self._vectors = vectors
        self._embedder = embedder
        self._generator = generator
        self._policy = policy
        self._segmenter = segmenter
        self._generation_concurrency = generation_concurrency
        self._auto_flush_pending = auto_flush_pending
        # Formation and deletion are exclusive per session (across servers with a lease coordinator);
        # adds only serialise among themselves, so a slow formation (LLM) never delays an add.
        self._coordinator = coordinator or LocalCoordinator()
        self._add_locks = SessionLocks()
        self.timings = StageTimings()

    @contextmanager
    def hold(self, group_id: str, session_ids: Iterable[str]) -> Iterator[None]:
        """The sessions' formation locks (what a formation holds), in a fixed order."""
        with self._coordinator.hold([(group_id, session_id) for session_id in session_ids]):
            yield

    # -- messages in --------------------------------------------------------------------

    def add_messages(self, group_id: str, session_id: str, messages: Sequence[Message]) -> AddReceipt:
        """Store messages durably. Idempotent by id: the same id and content again is a duplicate,
        the same id with other content is a conflict (and nothing of the batch is written)."""
        ids = [message.id for message in messages]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            repeated = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
            raise InvalidInputError("message ids repeat within the batch", details={"ids": repeated[:20]})
        with self._add_locks.hold([(group_id, session_id)]), self.timings.stage("store_messages"):
            existing = self._log.get_messages(group_id, session_id, ids)
            conflicts = [m.id for m in messages if m.id in existing and not _same_message(existing[m.id].message, m)]
            if conflicts:
                raise ConflictError("message ids already exist with different content", details={"ids": conflicts[:20]})
            new = [m for m in messages if m.id not in existing]
            if self._log.get_session_info(group_id, session_id) is None:
                self._log.put_session_info(SessionInfo(group_id=group_id, session_id=session_id))
            base = time.time_ns()
            received = utc_now()
            # Insert, never overwrite: a message that a formation already moved on stays as it is.
            self._log.insert_messages(
                group_id,
                [
                    StoredMessage(
                        group_id=group_id, session_id=session_id, message=m, received_at=received, sequence=base + i
                    )
                    for i, m in enumerate(new)
                ],
            )
            if new and self._coordinator.distributed:
                # Another server may have inserted the same id first, with other content.
                stored = self._log.get_messages(group_id, session_id, [m.id for m in new])
                lost = [m.id for m in new if m.id not in stored or not _same_message(stored[m.id].message, m)]
                if lost:
                    raise ConflictError(
                        "a concurrent request stored these message ids first, with different content",
                        details={"ids": lost[:20]},
                    )
            pending = len(self._log.list_messages(group_id, session_id, states=[MessageState.PENDING]))
        return AddReceipt(
            accepted=[m.id for m in new], duplicates=[m.id for m in messages if m.id in existing], pending=pending
        )

    def needs_formation(self, receipt: AddReceipt) -> bool:
        return receipt.pending >= self._auto_flush_pending

    # -- episodes out --------------------------------------------------------------------

    def flush(self, group_id: str, session_id: str, *, reason: BoundaryReason = BoundaryReason.FLUSH) -> list[Episode]:
        """Turn every unfinished message of the session into stored, searchable episodes."""
        return self.form([(group_id, session_id)], close_tail=True, final_reason=reason)

    def form_closed(self, group_id: str, session_id: str) -> list[Episode]:
        """Form the segments that a later cut has closed; the open tail stays pending,
        unless it is full or idle for longer than the time gap."""
        return self.form([(group_id, session_id)], close_tail=False)

    def form(
        self,
        sessions: Sequence[tuple[str, str]],
        *,
        close_tail: bool,
        final_reason: BoundaryReason = BoundaryReason.FLUSH,
    ) -> list[Episode]:
        """Form episodes for several sessions at once: one embedding batch for all their messages,
        one for all their episodes, one write per partition."""
        with self._coordinator.hold(sessions):
            jobs: list[GenerationJob] = []
            message_vectors: MessageVectors = {}
            for group_id, session_id in sessions:
                jobs += self._plan(
                    group_id, session_id, message_vectors, close_tail=close_tail, final_reason=final_reason
                )
            return self._execute(jobs, message_vectors) if jobs else []

    def _plan(
        self,
        group_id: str,
        session_id: str,
        message_vectors: MessageVectors,
        *,
        close_tail: bool,
        final_reason: BoundaryReason,
    ) -> list[GenerationJob]:
        """The session's jobs: those planned before a crash, then the new segments of its pending
        messages (step 1 written for them); their message vectors go into ``message_vectors``."""
        unfinished = self._log.list_messages(group_id, session_id, states=[MessageState.PENDING, MessageState.FORMING])
        resumed = _resumed_jobs(group_id, session_id, unfinished)
        pending = [s.message for s in unfinished if s.state is MessageState.PENDING]
        if not pending:
            return resumed
        with self.timings.stage("embedding"):
            vectors = self._embedder.embed_batch([message_line(m) for m in pending])
        for message, vector in zip(pending, vectors, strict=True):
            message_vectors[(group_id, session_id, message.id)] = vector
        with self.timings.stage("segmentation"):
            segments = self._segmenter.segment(pending, vectors=vectors, final_reason=final_reason)
        if not close_tail:
            segments = self._closed(segments)
        jobs = [
            GenerationJob(segment, group_id, session_id, episode_id_for(group_id, session_id, segment.message_ids))
            for segment in segments
        ]
        self._coordinator.verify([(group_id, session_id)])
        self._write_plans(jobs, unfinished)
        return resumed + jobs

    def _closed(self, segments: list[Segment]) -> list[Segment]:
        """The segments a later cut has closed; the open tail too when it is full or idle."""
        if not segments:
            return segments
        tail = segments[-1]
        if len(tail.messages) >= self._policy.max_messages:
            return [*segments[:-1], tail.model_copy(update={"boundary_reason": BoundaryReason.MAX_SIZE})]
        if utc_now() - tail.messages[-1].timestamp > self._policy.time_gap:
            return [*segments[:-1], tail.model_copy(update={"boundary_reason": BoundaryReason.TIME_GAP})]
        return segments[:-1]

    def _write_plans(self, jobs: list[GenerationJob], unfinished: list[StoredMessage]) -> None:
        """Step 1: record which episode each message goes to, before any episode is written."""
        by_id = {stored.message.id: stored for stored in unfinished}
        for job in jobs:
            update = {"state": MessageState.FORMING, "episode_id": job.episode_id}
            update["boundary_reason"] = job.segment.boundary_reason
            self._log.put_messages(job.group_id, [by_id[m.id].model_copy(update=update) for m in job.segment.messages])

    def _execute(
        self, jobs: list[GenerationJob], message_vectors: dict[tuple[str, str, str], np.ndarray]
    ) -> list[Episode]:
        """Steps 2 and 3: generate, embed and write the episodes, then mark their messages done."""
        with self.timings.stage("generation"):
            episodes = batch_generate_episodes(self._generator, jobs, concurrency=self._generation_concurrency)
        missing = [
            (job.group_id, job.session_id, m)
            for job in jobs
            for m in job.segment.messages
            if (job.group_id, job.session_id, m.id) not in message_vectors
        ]
        with self.timings.stage("embedding"):
            episode_vectors = self._embedder.embed_batch([episode_embedding_text(e) for e in episodes])
            if missing:
                vectors = self._embedder.embed_batch([message_line(m) for _, _, m in missing])
                for (g, s, m), vector in zip(missing, vectors, strict=True):
                    message_vectors[(g, s, m.id)] = vector
        by_partition: dict[tuple[str, str], list[VectorRecord]] = defaultdict(list)
        done: dict[str, list[StoredMessage]] = defaultdict(list)
        for job, episode, vector in zip(jobs, episodes, episode_vectors, strict=True):
            records = by_partition[(job.group_id, job.session_id)]
            records.append(VectorRecord.of_episode(episode, vector))
            for message in job.segment.messages:
                stored = StoredMessage(
                    group_id=job.group_id,
                    session_id=job.session_id,
                    message=message,
                    state=MessageState.DONE,
                    episode_id=job.episode_id,
                    boundary_reason=job.segment.boundary_reason,
                )
                records.append(
                    VectorRecord.of_message(stored, message_vectors[(job.group_id, job.session_id, message.id)])
                )
                done[job.group_id].append(stored)
        self._coordinator.verify(list(by_partition))
        with self.timings.stage("storage"):
            for (g, s), records in by_partition.items():
                self._vectors.upsert(g, s, records)
            for g, stored_messages in done.items():
                self._mark_done(g, stored_messages)
        self.timings.episodes_created += len(episodes)
        log.info("formed %d episodes", len(episodes))
        return episodes

    def _mark_done(self, group_id: str, stored_messages: list[StoredMessage]) -> None:
        """Step 3; keeps each message's original receipt time and sequence."""
        by_session: dict[str, list[StoredMessage]] = defaultdict(list)
        for stored in stored_messages:
            by_session[stored.session_id].append(stored)
        updated: list[StoredMessage] = []
        for session_id, items in by_session.items():
            current = self._log.get_messages(group_id, session_id, [s.message.id for s in items])
            for stored in items:
                previous = current.get(stored.message.id)
                if previous is None:
                    continue  # deleted meanwhile: do not resurrect it
                updated.append(
                    stored.model_copy(update={"received_at": previous.received_at, "sequence": previous.sequence})
                )
        self._log.put_messages(group_id, updated)

    # -- recovery ----------------------------------------------------------------------------

    def unfinished_sessions(self) -> list[tuple[str, str]]:
        return [
            (group_id, session_id)
            for group_id in self._log.list_groups()
            for session_id in sorted(self._log.sessions_with_unfinished_messages(group_id))
        ]

    def recover(self) -> list[Episode]:
        """Finish what a crash interrupted: planned episodes, closed segments and idle tails."""
        return self.form(self.unfinished_sessions(), close_tail=False)


def _same_message(a: Message, b: Message) -> bool:
    """Whether ``b`` (arriving) repeats ``a`` (stored). A message sent without a timestamp is stamped
    by the server on arrival, so a retry of it compares everything but the timestamp."""
    stamped = "timestamp" not in b.model_fields_set
    return (a.content, a.role, a.producer_id, a.produced_for_id) == (
        b.content,
        b.role,
        b.producer_id,
        b.produced_for_id,
    ) and (stamped or a.timestamp == b.timestamp)


def _resumed_jobs(group_id: str, session_id: str, unfinished: list[StoredMessage]) -> list[GenerationJob]:
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
