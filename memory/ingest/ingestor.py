"""The write path: messages stored durably first, then cut into episodes, embedded and stored.

Episode formation is a three-step write-ahead protocol per segment, so that a crash at any
point neither loses nor duplicates anything:

1. the segment's messages are marked FORMING with the (deterministic) episode id they will get;
2. the episode is written, then the message vectors that name it (upserts, idempotent by id; a message whose
   vector record holds its vector since it was added gets the episode's id in that record's metadata, an
   update that never creates a record, so a message deleted meanwhile stays deleted): until a message's
   vector names its episode, readers find it in its session's open episode, so a reader never
   meets a message whose episode it cannot read;
3. the messages are marked DONE.

After a crash, FORMING messages are regenerated as exactly the planned segment, and PENDING
ones are segmented again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta

import numpy as np

from memory.embedding.embedder import Embedder
from memory.episodes.generation import (
    EpisodeGenerator,
    GenerationJob,
    batch_generate_episodes,
    episode_id_for,
    generate_episodes,
)
from memory.episodes.segmentation import SegmentationPolicy, Segmenter
from memory.events import FORMATION_ACTOR, NO_EVENTS, ChangeType, EventPublisher, change
from memory.ingest.batches import resumed_jobs
from memory.ingest.coordination import Coordinator, LocalCoordinator
from memory.ingest.intake import Embedded, Intake
from memory.ingest.timings import StageTimings
from memory.ingest.writer import OrderedWriter
from memory.models import BoundaryReason, Episode, MessageState, Segment, StoredMessage
from memory.receipts import AddReceipt
from memory.store.codec import message_record_id
from memory.store.paging import WRITE_BATCH
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import VectorRecord
from memory.text import episode_embedding_text, message_line
from memory.timeutil import utc_now

log = logging.getLogger("epimem.ingest")
MessageVectors = dict[tuple[str, str, str], np.ndarray]  # (group, session, message id) -> vector
# Messages whose vector was read back from their own vector record (written when they were added): a formation
# only names their episode in that record (a metadata update), instead of writing the vector again (an upsert
# re-indexes every vector it writes: ~20 times the time of the update, the interpreter held throughout).
Indexed = set[tuple[str, str, str]]


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
        idle: timedelta = timedelta(minutes=30),
        events: EventPublisher = NO_EVENTS,
    ) -> None:
        self._log = log
        self._events = events  # told of every episode formed (memory.events)
        self._vectors = vectors
        self._embedder = embedder
        self._generator = generator
        self._policy = policy
        self._segmenter = segmenter
        self._generation_concurrency = generation_concurrency
        self._auto_flush_pending = auto_flush_pending
        self._idle = idle  # a session whose newest message arrived this long ago is formed whole
        # Formation and deletion are exclusive per session (across servers with a lease coordinator).
        self._coordinator = coordinator or LocalCoordinator()
        self.timings = StageTimings()
        self.intake = Intake(
            log=log, vectors=vectors, embedder=embedder, coordinator=self._coordinator, timings=self.timings
        )

    @contextmanager
    def hold(self, group_id: str, session_ids: Iterable[str]) -> Iterator[None]:
        """The sessions' formation locks (what a formation holds), in a fixed order."""
        with self._coordinator.hold([(group_id, session_id) for session_id in session_ids]):
            yield

    def needs_formation(self, receipt: AddReceipt) -> bool:
        return receipt.pending >= self._auto_flush_pending

    # -- episodes out --------------------------------------------------------------------

    def flush(self, group_id: str, session_id: str, *, reason: BoundaryReason = BoundaryReason.FLUSH) -> list[Episode]:
        """Turn every unfinished message of the session into stored, searchable episodes."""
        return self.form([(group_id, session_id)], close_tail=True, final_reason=reason)

    def form_closed(self, group_id: str, session_id: str) -> list[Episode]:
        """Form the segments that a later cut has closed; the open tail stays pending, unless it is
        full or the session is idle (no message arrived for ``idle``)."""
        return self.form([(group_id, session_id)], close_tail=False)

    def form(
        self,
        sessions: Sequence[tuple[str, str]],
        *,
        close_tail: bool,
        final_reason: BoundaryReason = BoundaryReason.FLUSH,
        embedded: Embedded | None = None,
    ) -> list[Episode]:
        """Form episodes for several sessions at once: one embedding batch for all their messages
        (unless ``embedded`` has them already), one for all their episodes, few large writes. The
        writes run in a background thread in write-ahead order (plans, vectors, done) while the
        next embedding runs; it returns once they have all landed."""
        with self._coordinator.hold(sessions), OrderedWriter() as writer:
            message_vectors: MessageVectors = {}
            indexed: Indexed = set()
            if self._generation_concurrency > 1 and len(sessions) > 1:  # an LLM segmenter waits on the LLM
                with ThreadPoolExecutor(min(self._generation_concurrency, len(sessions))) as pool:
                    planned = list(
                        pool.map(lambda key: self._plan(key[0], key[1], close_tail, final_reason, embedded), sessions)
                    )
            else:
                planned = [self._plan(g, s, close_tail, final_reason, embedded) for g, s in sessions]
            jobs: list[GenerationJob] = []
            forming: dict[str, list[StoredMessage]] = defaultdict(list)
            for session_jobs, vectors, plans, read_back in planned:
                jobs += session_jobs
                message_vectors.update(vectors)
                indexed |= read_back
                for stored in plans:
                    forming[stored.group_id].append(stored)
            if forming:
                writer.submit(lambda: self._write_plans(forming))
            formed = self._execute(jobs, message_vectors, indexed, writer) if jobs else []
            self._announce(formed)  # inside the sessions' locks: a session's events keep their order
            return formed

    def _announce(self, formed: Sequence[Episode]) -> None:
        by_session: dict[tuple[str, str], list[Episode]] = defaultdict(list)
        for episode in formed:
            by_session[(episode.group_id, episode.session_id)].append(episode)
        for (group_id, session_id), episodes in by_session.items():
            sources = [m for e in episodes for m in e.source_message_ids]
            self._events.publish(
                change(
                    ChangeType.EPISODES_FORMED,
                    group_id,
                    actor=FORMATION_ACTOR,
                    session_id=session_id,
                    episodes=[e.uuid for e in episodes],
                    messages=sources,
                )
            )

    def _plan(
        self,
        group_id: str,
        session_id: str,
        close_tail: bool,
        final_reason: BoundaryReason,
        embedded: Embedded | None,
    ) -> tuple[list[GenerationJob], MessageVectors, list[StoredMessage], Indexed]:
        """The session's jobs: those planned before a crash, then the new segments of its pending
        messages; their message vectors; the step-1 records to write for the new ones; the messages whose
        vectors were read back from their records."""
        unfinished = self._log.list_messages(group_id, session_id, states=[MessageState.PENDING, MessageState.FORMING])
        resumed = resumed_jobs(group_id, session_id, unfinished)
        pending = [s.message for s in unfinished if s.state is MessageState.PENDING]
        if not pending:
            return resumed, {}, [], set()
        texts = [message_line(m) for m in pending]
        given = embedded or {}
        known = [given.get((group_id, session_id, m.id)) for m in pending]
        vectors: list[np.ndarray | None] = [
            found[1] if found is not None and found[0] == text else None
            for found, text in zip(known, texts, strict=True)
        ]
        stored: dict[str, np.ndarray] = {}
        if any(vector is None for vector in vectors):  # embedded when they were added (live memory)
            stored = self.intake.stored_vectors(
                group_id, session_id, [m for m, v in zip(pending, vectors, strict=True) if v is None]
            )
            vectors = [v if v is not None else stored.get(m.id) for m, v in zip(pending, vectors, strict=True)]
        todo = [position for position, vector in enumerate(vectors) if vector is None]
        if todo:
            with self.timings.stage("embedding"):
                computed = self._embedder.embed_batch([texts[p] for p in todo])
            for position, vector in zip(todo, computed, strict=True):
                vectors[position] = vector
        matrix = np.stack([v for v in vectors if v is not None])
        found_vectors = {(group_id, session_id, m.id): matrix[i] for i, m in enumerate(pending)}
        with self.timings.stage("segmentation"):
            segments = self._segmenter.segment(pending, vectors=matrix, final_reason=final_reason)
        if not close_tail:
            segments = self._closed(segments, {s.message.id: s for s in unfinished})
        jobs = [
            GenerationJob(segment, group_id, session_id, episode_id_for(group_id, session_id, segment.message_ids))
            for segment in segments
        ]
        by_id = {stored.message.id: stored for stored in unfinished}
        plans = [
            by_id[m.id].model_copy(
                update={
                    "state": MessageState.FORMING,
                    "episode_id": job.episode_id,
                    "boundary_reason": job.segment.boundary_reason,
                }
            )
            for job in jobs
            for m in job.segment.messages
        ]
        return resumed + jobs, found_vectors, plans, {(group_id, session_id, message_id) for message_id in stored}

    def _closed(self, segments: list[Segment], stored: Mapping[str, StoredMessage]) -> list[Segment]:
        """The segments a later cut has closed; the open tail too when it is full, or when the session
        went quiet: none of its messages *arrived* in the last ``idle`` (their own timestamps may be
        anything: an import of last year's chat is not idle the moment it arrives)."""
        if not segments:
            return segments
        tail = segments[-1]
        if len(tail.messages) >= self._policy.max_messages:
            return [*segments[:-1], tail.model_copy(update={"boundary_reason": BoundaryReason.MAX_SIZE})]
        arrived = max(stored[m.id].received_at for m in tail.messages)
        if utc_now() - arrived >= self._idle:
            return [*segments[:-1], tail.model_copy(update={"boundary_reason": BoundaryReason.IDLE})]
        return segments[:-1]

    def newest_pending_arrival(self, group_id: str, session_id: str) -> datetime | None:
        """When the session's newest pending message arrived (None: nothing pending)."""
        pending = self._log.list_messages(group_id, session_id, states=[MessageState.PENDING])
        return max((s.received_at for s in pending), default=None)

    def _write_plans(self, plans: Mapping[str, list[StoredMessage]]) -> None:
        """Step 1: record which episode each message goes to, before any episode is written (one
        state update per group)."""
        self._coordinator.verify(sorted({(s.group_id, s.session_id) for items in plans.values() for s in items}))
        with self.timings.stage("storage"):
            for group_id, stored in plans.items():
                for start in range(0, len(stored), WRITE_BATCH):
                    self._log.set_states(group_id, stored[start : start + WRITE_BATCH])

    def _execute(
        self, jobs: list[GenerationJob], message_vectors: MessageVectors, indexed: Indexed, writer: OrderedWriter
    ) -> list[Episode]:
        """Steps 2 and 3: generate, embed and write the episodes, then their messages' vectors, then mark the
        messages done."""
        missing = [
            (job.group_id, job.session_id, m)
            for job in jobs
            for m in job.segment.messages
            if (job.group_id, job.session_id, m.id) not in message_vectors
        ]
        if missing:  # resumed after a crash: their vectors were not kept
            with self.timings.stage("embedding"):
                vectors = self._embedder.embed_batch([message_line(m) for _, _, m in missing])
            for (g, s, m), vector in zip(missing, vectors, strict=True):
                message_vectors[(g, s, m.id)] = vector
        messages: dict[str, dict[str, list[VectorRecord]]] = defaultdict(lambda: defaultdict(list))
        named: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)  # indexed: (record id, episode id)
        done: dict[str, list[StoredMessage]] = defaultdict(list)
        for job in jobs:
            for message in job.segment.messages:
                stored = StoredMessage(
                    group_id=job.group_id,
                    session_id=job.session_id,
                    message=message,
                    state=MessageState.DONE,
                    episode_id=job.episode_id,
                    boundary_reason=job.segment.boundary_reason,
                )
                key = (job.group_id, job.session_id, message.id)
                if key in indexed:
                    named[(job.group_id, job.session_id)].append(
                        (message_record_id(job.session_id, message.id), job.episode_id)
                    )
                else:
                    messages[job.group_id][job.session_id].append(VectorRecord.of_message(stored, message_vectors[key]))
                done[job.group_id].append(stored)
        partitions = sorted({(job.group_id, job.session_id) for job in jobs})
        episodes, episode_vectors = self._generate_and_embed(jobs)
        records: dict[str, dict[str, list[VectorRecord]]] = defaultdict(lambda: defaultdict(list))
        for job, episode, vector in zip(jobs, episodes, episode_vectors, strict=True):
            records[job.group_id][job.session_id].append(VectorRecord.of_episode(episode, vector))
        # The episodes before their messages' vectors (step 2 of the module's docstring).
        writer.submit(lambda: self._write_vectors(partitions, records))
        writer.submit(lambda: self._write_vectors(partitions, messages))
        writer.submit(lambda: self._name_episodes(partitions, named))
        writer.submit(lambda: self._mark_done(done))
        writer.wait()
        self.timings.count_episodes(len(episodes))
        log.info("formed %d episodes", len(episodes))
        return episodes

    def _generate_and_embed(self, jobs: list[GenerationJob]) -> tuple[list[Episode], list[np.ndarray]]:
        """The jobs' episodes and their vectors. Offline, generation is instant: one embedding call for
        all. With an LLM (concurrency > 1) the calls wait on the network, so the episodes already back
        are embedded, a wave of ``concurrency`` at a time, while the later ones are awaited."""
        concurrency = self._generation_concurrency
        episodes: list[Episode] = []
        vectors: list[np.ndarray] = []
        if concurrency <= 1:
            with self.timings.stage("generation"):
                episodes = batch_generate_episodes(self._generator, jobs)
            with self.timings.stage("embedding"):
                return episodes, list(self._embedder.embed_batch([episode_embedding_text(e) for e in episodes]))
        with self.timings.stage("generation"):  # its seconds include the embedding done meanwhile
            for episode in generate_episodes(self._generator, jobs, concurrency=concurrency):
                episodes.append(episode)
                if len(episodes) - len(vectors) >= concurrency or len(episodes) == len(jobs):
                    with self.timings.stage("embedding"):
                        ready = [episode_embedding_text(e) for e in episodes[len(vectors) :]]
                        vectors += list(self._embedder.embed_batch(ready))
        return episodes, vectors

    def _write_vectors(
        self, partitions: list[tuple[str, str]], records: Mapping[str, Mapping[str, list[VectorRecord]]]
    ) -> None:
        """Step 2 (vectors, partitions and group index), after checking the sessions are still ours."""
        self._coordinator.verify(partitions)
        with self.timings.stage("storage"):
            for group_id, by_session in records.items():
                self._vectors.upsert_sessions(group_id, by_session)

    def _name_episodes(
        self, partitions: list[tuple[str, str]], named: Mapping[tuple[str, str], list[tuple[str, str]]]
    ) -> None:
        """Step 2 for the messages whose vector records hold their vectors: each record names its episode."""
        self._coordinator.verify(partitions)
        with self.timings.stage("storage"):
            for (group_id, session_id), pairs in named.items():
                updates = [{"episode_id": episode_id} for _, episode_id in pairs]
                self._vectors.update_metadata(group_id, session_id, [record_id for record_id, _ in pairs], updates)

    def _mark_done(self, done: Mapping[str, list[StoredMessage]]) -> None:
        """Step 3: a state update, which keeps each message's receipt time and sequence, and never
        brings back a message deleted meanwhile."""
        with self.timings.stage("storage"):
            for group_id, stored in done.items():
                for start in range(0, len(stored), WRITE_BATCH):
                    self._log.set_states(group_id, stored[start : start + WRITE_BATCH])

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
