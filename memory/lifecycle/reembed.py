"""Re-embedding after a model change: every vector rebuilt from its stored text with the configured
model, collection by collection, each rebuilt beside the old one and swapped in when complete."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from memory.embedding.embedder import Embedder
from memory.store.protocols import Administration, LogReader
from memory.store.records import VectorRecord, message_record_id
from memory.text import episode_embedding_text, message_line

Progress = Callable[[int, int], None]
EMBED_BATCH = 256


@dataclass
class ReembedReport:
    model_id: str
    collections: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    vectors: int = 0
    groups: list[str] = field(default_factory=list)


class Reembedder:
    def __init__(self, *, log: LogReader, admin: Administration, embedder: Embedder) -> None:
        self._log = log
        self._admin = admin
        self._embedder = embedder

    def groups(self) -> list[str]:
        """Every group that has a vector collection (what ``reembed()`` of all groups touches)."""
        return sorted({str(m["group_id"]) for _, m in self._admin.epimem_collections() if "group_id" in m})

    def reembed(self, group_id: str | None = None, progress: Progress | None = None) -> ReembedReport:
        """Rebuild every vector of a group (or of all groups) from its stored text with the current
        model, and record that model on each rebuilt collection. Collections already built with
        the current model are skipped, so an interrupted run can simply be repeated."""
        model_id = self._admin.model_id
        report = ReembedReport(model_id=model_id)
        self._admin.finish_rebuilds()
        todo: dict[str, list[str]] = defaultdict(list)
        for name, metadata in self._admin.epimem_collections(group_id):
            if metadata.get("epimem") not in ("partition", "index"):
                continue
            if metadata.get("epimem_model") == model_id:
                report.skipped.append(name)
            else:
                todo[str(metadata["group_id"])].append(name)
        contents = {name: self._admin.read_collection(name) for names in todo.values() for name in names}
        total = len({(g, r.id) for g, names in todo.items() for name in names for r in contents[name]})
        done = 0
        if progress is not None:
            progress(0, total)
        for group, names in sorted(todo.items()):
            pending = {r.id: r for name in names for r in contents[name]}
            texts = self._texts(group, list(pending.values()))
            ids = list(texts)
            vectors: dict[str, np.ndarray] = {}
            for start in range(0, len(ids), EMBED_BATCH):
                batch = ids[start : start + EMBED_BATCH]
                vectors.update(zip(batch, self._embedder.embed_batch([texts[i] for i in batch]), strict=True))
                done += len(batch)
                if progress is not None:
                    progress(done, total)
            for name in names:
                self._admin.rebuild_collection(name, [r.with_embedding(vectors[r.id]) for r in contents[name]])
                report.collections.append(name)
            report.vectors += len(ids)
            report.groups.append(group)
        return report

    def _texts(self, group_id: str, records: list[VectorRecord]) -> dict[str, str]:
        """What each record's vector is made from: the same text as at ingestion."""
        wanted: dict[str, list[str]] = defaultdict(list)
        for record in records:
            if record.is_message:
                wanted[record.session_id].append(record.message_id)
        messages = {
            message_record_id(session_id, message_id): stored.message
            for session_id, ids in wanted.items()
            for message_id, stored in self._log.get_messages(group_id, session_id, ids).items()
        }
        texts = {}
        for record in records:
            if record.is_message:
                message = messages.get(record.id)
                speaker = record.producer_id or record.metadata.get("role", "user")
                texts[record.id] = message_line(message) if message else f"{speaker}: {record.document}"
            else:
                texts[record.id] = episode_embedding_text(record.episode())
        return texts
