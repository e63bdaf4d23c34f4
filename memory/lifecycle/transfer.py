"""Export and import of a group in the epimem JSON Lines format (memory.lifecycle.export_format).

Export reads the log before the vectors, so a formation running meanwhile leaves at worst a message
marked forming whose episode exists (``recover()`` after import settles it). Import writes a file
that ``read_export`` has checked whole; embeddings are reused only when the file's model is the
service's, otherwise rebuilt from the stored text; everything is written by id (importing twice
changes nothing the second time). An import never rewrites memory: a message, episode or summary
whose id the group already holds with other text (or other sources) is refused with 409, and
nothing of the file is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from memory.embedding.embedder import Embedder
from memory.errors import ConflictError, InvalidInputError
from memory.lifecycle.export_format import FORMAT, VERSION, ExportContents, line, model_identity
from memory.lifecycle.revisions import Revision, RevisionLog
from memory.models import Episode, StoredMessage, check_scope_id
from memory.receipts import ImportReceipt
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import RecordKind, VectorRecord
from memory.text import episode_embedding_text, message_line
from memory.timeutil import utc_now

EMBED_BATCH = 256
Planned = tuple[str, VectorRecord, str]  # session, record (without its embedding), text to embed


class Transfer:
    def __init__(self, *, log: LogWriter, vectors: VectorWriter, embedder: Embedder, model_id: str) -> None:
        self._log = log
        self._vectors = vectors
        self._embedder = embedder
        self._model_id = model_id
        self._revisions = RevisionLog(log)

    # -- export ---------------------------------------------------------------------------------

    def export(self, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
        """The group as JSON Lines, each line ending with a newline."""
        config = self._log.get_group_config(group_id)
        sessions = self._log.list_sessions(group_id)
        messages = [stored for info in sessions for stored in self._log.list_messages(group_id, info.session_id)]
        records = self._vectors.records(group_id, embeddings=include_embeddings)
        histories = self._revisions.everything(group_id)
        yield line(
            {
                "type": "header",
                "format": FORMAT,
                "version": VERSION,
                "group_id": group_id,
                "exported_at": utc_now().isoformat(),
                "embedding_model": model_identity(self._model_id),
                "embeddings": include_embeddings,
            }
        )
        if config is not None:
            yield line({"type": "group", "config": config.model_dump(mode="json")})
        for info in sessions:
            yield line({"type": "session", "session": info.model_dump(mode="json")})
        for stored in messages:
            yield line({"type": "message", "record": stored.model_dump(mode="json")})
        counts = {"sessions": len(sessions), "messages": len(messages), "episodes": 0, "summaries": 0}
        counts["message_vectors"] = 0
        for record in records:
            if record.is_episode:
                item: dict[str, Any] = {"type": record.kind, "episode": record.episode().model_dump(mode="json")}
                counts["episodes" if record.kind == RecordKind.EPISODE else "summaries"] += 1
            elif record.is_message:
                item = {"type": "message_vector", "session_id": record.session_id, "message_id": record.message_id}
                counts["message_vectors"] += 1
            else:
                continue
            if include_embeddings and record.embedding is not None:
                item["embedding"] = [float(x) for x in record.embedding]
            yield line(item)
        for (session_id, episode_id), revisions in sorted(histories.items()):
            for revision in revisions:
                dumped = revision.model_dump(mode="json")
                yield line({"type": "revision", "session_id": session_id, "episode_id": episode_id, "revision": dumped})
                counts["revisions"] = counts.get("revisions", 0) + 1
        yield line({"type": "end", "counts": counts})

    # -- import ---------------------------------------------------------------------------------

    def import_(self, parsed: ExportContents, *, group_id: str | None = None) -> ImportReceipt:
        """Write a validated export into ``group_id`` (default: the group it was exported from)."""
        source_group = str(parsed.header["group_id"])
        target = check_scope_id(group_id) if group_id is not None else source_group
        source_model = str(parsed.header["embedding_model"].get("id", ""))

        def regroup(model: Any) -> Any:
            return model.model_copy(update={"group_id": target})

        sessions = [regroup(info) for info in parsed.sessions]
        messages: list[StoredMessage] = [regroup(stored) for stored in parsed.messages]
        by_key = {(m.session_id, m.message.id): m for m in messages}
        if len(by_key) != len(messages):
            raise InvalidInputError("the file holds the same message twice")
        self._check_conflicts(target, messages)
        episodes = [regroup(item) for _, item, _ in parsed.vectors if isinstance(item, Episode)]
        self._check_episode_conflicts(target, episodes)
        planned = [_planned(item, regroup, by_key) for _, item, _ in parsed.vectors]
        embeddings = [embedding for _, _, embedding in parsed.vectors]
        reuse = (
            source_model == self._model_id
            and bool(embeddings)
            and all(e is not None and len(e) == self._embedder.dimension for e in embeddings)
        )
        vectors = np.asarray(embeddings, dtype=np.float32) if reuse else self._embed([t for _, _, t in planned])

        if parsed.config is not None:
            self._log.put_group_config(regroup(parsed.config))
        else:
            self._log.register_group(target)
        for info in sessions:
            self._log.put_session_info(info)
        self._log.put_messages(target, messages)
        self._write_vectors(target, planned, vectors)
        self._write_revisions(target, parsed.revisions)
        kinds = [kind for kind, _, _ in parsed.vectors]
        return ImportReceipt(
            group_id=target,
            source_group_id=source_group,
            source_model=source_model,
            reembedded=not reuse and bool(planned),
            sessions=len(sessions),
            messages=len(messages),
            episodes=kinds.count(RecordKind.EPISODE),
            summaries=kinds.count(RecordKind.SUMMARY),
            vectors=len(planned),
        )

    def _write_revisions(self, group_id: str, revisions: list[tuple[str, str, Revision]]) -> None:
        by_episode: dict[tuple[str, str], list[Revision]] = {}
        for session_id, episode_id, revision in revisions:
            by_episode.setdefault((session_id, episode_id), []).append(revision)
        for (session_id, episode_id), items in by_episode.items():
            self._revisions.put(group_id, session_id, episode_id, items)

    def _embed(self, texts: list[str]) -> np.ndarray:
        batches = [self._embedder.embed_batch(texts[i : i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)]
        return np.concatenate(batches) if batches else np.zeros((0, self._embedder.dimension), dtype=np.float32)

    def _write_vectors(self, group_id: str, planned: list[Planned], vectors: np.ndarray) -> None:
        """One write per run of consecutive records of a session: the file's order is kept in the index."""
        run: list[VectorRecord] = []
        run_session: str | None = None
        for (session_id, record, _), vector in zip(planned, vectors, strict=True):
            if run and session_id != run_session:
                self._vectors.upsert(group_id, str(run_session), run)
                run = []
            run_session = session_id
            run.append(record.with_embedding(vector))
        if run:
            self._vectors.upsert(group_id, str(run_session), run)

    def _check_conflicts(self, group_id: str, messages: list[StoredMessage]) -> None:
        by_session: dict[str, list[StoredMessage]] = {}
        for stored in messages:
            by_session.setdefault(stored.session_id, []).append(stored)
        conflicts = []
        for session_id, items in by_session.items():
            existing = self._log.get_messages(group_id, session_id, [s.message.id for s in items])
            conflicts += [
                s.message.id
                for s in items
                if s.message.id in existing and existing[s.message.id].message.content != s.message.content
            ]
        if conflicts:
            raise ConflictError(
                "the group already holds these message ids with other content", details={"ids": conflicts[:20]}
            )

    def _check_episode_conflicts(self, group_id: str, episodes: list[Episode]) -> None:
        if not episodes:
            return
        existing = {e.uuid: e for e in self._vectors.episodes(group_id, ids=[e.uuid for e in episodes])}
        conflicts = [e.uuid for e in episodes if e.uuid in existing and _memory_of(existing[e.uuid]) != _memory_of(e)]
        if conflicts:
            raise ConflictError(
                "the group already holds these episode ids with another title, text, time or sources; "
                "an import cannot rewrite memory (delete the episode first, or import into another group)",
                details={"ids": conflicts[:20]},
            )


def _memory_of(episode: Episode) -> tuple[Any, ...]:
    """What an episode tells: an import may not change it for an id the group already holds."""
    return (
        episode.episode_type,
        episode.session_id,
        episode.title,
        episode.content,
        episode.timestamp,
        episode.source_message_ids,
        episode.source_episode_ids,
    )


def _planned(item: Episode | tuple[str, str], regroup: Any, by_key: dict[tuple[str, str], StoredMessage]) -> Planned:
    """What one vector line of the file becomes in the target group."""
    if isinstance(item, Episode):
        episode = regroup(item)
        return episode.session_id, VectorRecord.of_episode(episode), episode_embedding_text(episode)
    stored = by_key.get(item)
    if stored is None:  # pending messages have vectors too (found before they are in an episode)
        raise InvalidInputError(f"a message vector names a message the file does not hold: {item[1]!r}")
    return stored.session_id, VectorRecord.of_message(stored), message_line(stored.message)
