"""Export of a group in the epimem JSON Lines format (memory.lifecycle.export_format); its import is
memory.lifecycle.importing.

Export reads the log before the vectors, so a formation running meanwhile leaves at worst a message
marked forming whose episode exists (``recover()`` after a restore settles it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memory.lifecycle.export_format import FORMAT, VERSION, line, model_identity
from memory.lifecycle.revisions import RevisionLog
from memory.store.protocols import LogWriter, VectorWriter
from memory.store.records import RecordKind
from memory.timeutil import utc_now


class Exporter:
    def __init__(self, *, log: LogWriter, vectors: VectorWriter, model_id: str) -> None:
        self._log = log
        self._vectors = vectors
        self._model_id = model_id
        self._revisions = RevisionLog(log)

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
