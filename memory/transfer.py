"""Export and import of a group: the epimem JSON Lines format, version 1.

One JSON object per line, in this order:

1. ``{"type": "header", "format": "epimem-export", "version": 1, "group_id", "exported_at",
   "embedding_model": {"id", "name", "dimension", "fingerprint"}, "embeddings": bool}``
2. ``{"type": "group", "config": GroupConfiguration}`` (when the group has one)
3. ``{"type": "session", "session": SessionInfo}`` per session
4. ``{"type": "message", "record": StoredMessage}`` per message: the verbatim message with its
   processing state (pending / forming / done), episode id, arrival time and sequence
5. the group's vectors in stored order: ``{"type": "episode" | "summary", "episode": Episode}``
   and ``{"type": "message_vector", "session_id", "message_id"}``, each with ``"embedding":
   [floats]`` when exported with embeddings
6. ``{"type": "end", "counts": {...}}``: what the file holds; a file without it is truncated

Importing validates the whole file before writing anything. Embeddings are reused only when the
file's model id equals the service's model (name, dimension and fingerprint); otherwise every
vector is rebuilt from the stored text with the service's model. Everything is written by id, so
importing the same file twice changes nothing the second time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from memory.embedding import Embedder
from memory.errors import ConflictError, InvalidInputError
from memory.ingestion import episode_embedding_text, message_embedding_text
from memory.models import Episode, GroupConfiguration, MessageState, SessionInfo, StoredMessage, check_scope_id
from memory.receipts import ImportReceipt as ImportReceipt  # re-exported: its old home
from memory.store import (
    ChromaStore,
    VectorRecord,
    episode_from_record,
    episode_metadata,
    message_record_id,
    message_vector_metadata,
)
from memory.summaries import GROUP_SUMMARY_SESSION
from memory.timeutil import utc_now

FORMAT = "epimem-export"
VERSION = 1
EMBED_BATCH = 256


def model_identity(model_id: str) -> dict[str, Any]:
    """``name:dimension:fingerprint`` (the embedder's model_id) as a record."""
    name, dimension, fingerprint = model_id.rsplit(":", 2) if model_id.count(":") >= 2 else (model_id, "0", "")
    return {
        "id": model_id,
        "name": name,
        "dimension": int(dimension) if dimension.isdigit() else 0,
        "fingerprint": fingerprint,
    }


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def export_group(store: ChromaStore, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
    """The group as JSON Lines (each line ends with a newline). The log is read before the vectors,
    so a formation running meanwhile leaves at worst a message marked forming whose episode exists
    (``recover()`` after import settles it)."""
    config = store.get_group_config(group_id)
    sessions = store.list_sessions(group_id)
    messages = [stored for info in sessions for stored in store.list_messages(group_id, info.session_id)]
    vectors = store.get_vectors(group_id, include_embeddings=include_embeddings)
    yield _line(
        {
            "type": "header",
            "format": FORMAT,
            "version": VERSION,
            "group_id": group_id,
            "exported_at": utc_now().isoformat(),
            "embedding_model": model_identity(store.model_id),
            "embeddings": include_embeddings,
        }
    )
    if config is not None:
        yield _line({"type": "group", "config": config.model_dump(mode="json")})
    for info in sessions:
        yield _line({"type": "session", "session": info.model_dump(mode="json")})
    for stored in messages:
        yield _line({"type": "message", "record": stored.model_dump(mode="json")})
    counts = {"sessions": len(sessions), "messages": len(messages), "episodes": 0, "summaries": 0, "message_vectors": 0}
    for record in vectors:
        kind = record.metadata.get("kind")
        line: dict[str, Any]
        if kind in ("episode", "summary"):
            line = {
                "type": kind,
                "episode": episode_from_record(record.document, record.metadata).model_dump(mode="json"),
            }
            counts["episodes" if kind == "episode" else "summaries"] += 1
        elif kind == "message":
            line = {
                "type": "message_vector",
                "session_id": record.metadata["session_id"],
                "message_id": record.metadata["message_id"],
            }
            counts["message_vectors"] += 1
        else:
            continue
        if include_embeddings and record.embedding is not None:
            line["embedding"] = [float(x) for x in record.embedding]
        yield _line(line)
    yield _line({"type": "end", "counts": counts})


@dataclass
class ExportContents:
    """A validated export file, ready to be written."""

    header: dict[str, Any]
    config: GroupConfiguration | None
    sessions: list[SessionInfo]
    messages: list[StoredMessage]
    vectors: list[tuple[str, Episode | tuple[str, str], list[float] | None]]

    @property
    def group_id(self) -> str:
        return str(self.header["group_id"])

    @property
    def session_ids(self) -> list[str]:
        return sorted({info.session_id for info in self.sessions} | {m.session_id for m in self.messages})


def read_export(lines: Iterable[str]) -> ExportContents:
    """Parse and validate a whole export; raises InvalidInputError naming the first bad line."""
    header: dict[str, Any] | None = None
    parsed = ExportContents({}, None, [], [], [])
    end: dict[str, Any] | None = None
    places: dict[int, int] = {}  # id() of a parsed record -> its line number
    number = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if end is not None:
            raise InvalidInputError(f"line {number}: content after the end record")
        try:
            item = json.loads(raw)
            if not isinstance(item, dict):
                raise InvalidInputError(f"line {number}: not a JSON object")
            kind = item.get("type")
            if header is None:
                if kind != "header" or item.get("format") != FORMAT:
                    raise InvalidInputError(f"line {number}: not an {FORMAT} file (the first line must be its header)")
                if item.get("version") != VERSION:
                    raise InvalidInputError(f"unsupported {FORMAT} version {item.get('version')!r}; this is {VERSION}")
                header = item
                check_scope_id(str(header.get("group_id", "")))
                if not isinstance(header.get("embedding_model"), dict):
                    raise InvalidInputError("the header does not name the embedding model")
            elif kind == "group":
                parsed.config = GroupConfiguration.model_validate(item["config"])
            elif kind == "session":
                parsed.sessions.append(_not_reserved(SessionInfo.model_validate(item["session"]), number))
            elif kind == "message":
                parsed.messages.append(_not_reserved(StoredMessage.model_validate(item["record"]), number))
            elif kind in ("episode", "summary"):
                episode = Episode.model_validate(item["episode"])
                if episode.episode_type.value != kind:
                    raise InvalidInputError(f"line {number}: a {kind} line holds a {episode.episode_type.value}")
                if kind == "episode":
                    _not_reserved(episode, number)
                parsed.vectors.append((kind, episode, _embedding(item, number)))
                places[id(episode)] = number
            elif kind == "message_vector":
                ref = (check_scope_id(str(item["session_id"])), str(item["message_id"]))
                parsed.vectors.append((kind, ref, _embedding(item, number)))
            elif kind == "end":
                end = item
            else:
                raise InvalidInputError(f"line {number}: unknown record type {kind!r}")
        except InvalidInputError:
            raise
        except (ValueError, KeyError, TypeError, ValidationError) as error:
            raise InvalidInputError(f"line {number}: {error}") from error
    if header is None:
        raise InvalidInputError("the file is empty")
    if end is None:
        raise InvalidInputError("the file is truncated: it has no end record")
    found = {
        "sessions": len(parsed.sessions),
        "messages": len(parsed.messages),
        "episodes": sum(kind == "episode" for kind, _, _ in parsed.vectors),
        "summaries": sum(kind == "summary" for kind, _, _ in parsed.vectors),
        "message_vectors": sum(kind == "message_vector" for kind, _, _ in parsed.vectors),
    }
    if end.get("counts") != found:
        raise InvalidInputError("the file does not hold what its end record counts", details={"found": found})
    _check_citations(parsed, places)
    parsed.header = header
    return parsed


def _not_reserved(record: Any, number: int) -> Any:
    """Only summaries live in the reserved group-summaries session."""
    if record.session_id == GROUP_SUMMARY_SESSION:
        raise InvalidInputError(
            f"line {number}: session {GROUP_SUMMARY_SESSION!r} is reserved for group summaries",
            details={"line": number},
        )
    return record


def _check_citations(parsed: ExportContents, places: dict[int, int]) -> None:
    """Every message an episode cites must be a message of the file."""
    messages = {(m.session_id, m.message.id) for m in parsed.messages}
    for kind, record, _ in parsed.vectors:
        if kind != "episode" or not isinstance(record, Episode):
            continue
        missing = [m for m in record.source_message_ids if (record.session_id, m) not in messages]
        if missing:
            line = places[id(record)]
            raise InvalidInputError(
                f"line {line}: episode {record.uuid} cites messages the file does not hold",
                details={"line": line, "message_ids": missing[:20]},
            )


def _embedding(item: dict[str, Any], number: int) -> list[float] | None:
    value = item.get("embedding")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(x, int | float) for x in value):
        raise InvalidInputError(f"line {number}: embedding must be a list of numbers")
    return [float(x) for x in value]


def import_group(
    store: ChromaStore, embedder: Embedder, parsed: ExportContents, *, group_id: str | None = None
) -> ImportReceipt:
    """Write a validated export into ``group_id`` (default: the group it was exported from)."""
    source_group = str(parsed.header["group_id"])
    target = check_scope_id(group_id) if group_id is not None else source_group
    source_model = str(parsed.header["embedding_model"].get("id", ""))

    def regroup(model: Any) -> Any:
        return model.model_copy(update={"group_id": target})

    config = regroup(parsed.config) if parsed.config is not None else None
    sessions = [regroup(info) for info in parsed.sessions]
    messages: list[StoredMessage] = [regroup(stored) for stored in parsed.messages]
    by_key = {(m.session_id, m.message.id): m for m in messages}
    if len(by_key) != len(messages):
        raise InvalidInputError("the file holds the same message twice")
    _check_conflicts(store, target, messages)

    records: list[tuple[str, VectorRecord, str]] = []  # session, record, text to embed
    for _kind, item, _ in parsed.vectors:
        if isinstance(item, Episode):
            episode = regroup(item)
            records.append(
                (
                    episode.session_id,
                    VectorRecord(episode.uuid, episode.content, episode_metadata(episode)),
                    episode_embedding_text(episode),
                )
            )
        else:
            stored = by_key.get(item)
            if stored is None or stored.state is not MessageState.DONE:
                raise InvalidInputError(f"a message vector names a message the file does not hold as done: {item[1]!r}")
            records.append(
                (
                    stored.session_id,
                    VectorRecord(
                        message_record_id(stored.session_id, stored.message.id),
                        stored.message.content,
                        message_vector_metadata(stored),
                    ),
                    message_embedding_text(stored.message),
                )
            )
    embeddings = [embedding for _, _, embedding in parsed.vectors]
    reuse = (
        source_model == store.model_id
        and all(e is not None and len(e) == embedder.dimension for e in embeddings)
        and bool(embeddings)
    )
    if reuse:
        vectors = np.asarray(embeddings, dtype=np.float32)
    else:
        texts = [text for _, _, text in records]
        batches = [embedder.embed_batch(texts[i : i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)]
        vectors = np.concatenate(batches) if batches else np.zeros((0, embedder.dimension), dtype=np.float32)

    if config is not None:
        store.put_group_config(config)
    else:
        store.register_group(target)
    for info in sessions:
        store.put_session_info(info)
    store.put_messages(target, messages)
    # Consecutive runs of one session keep the file's order in the group index.
    run: list[VectorRecord] = []
    run_session: str | None = None
    for (session_id, record, _), vector in zip(records, vectors, strict=True):
        if run and session_id != run_session:
            store.upsert_vectors(target, str(run_session), run)
            run = []
        run_session = session_id
        run.append(VectorRecord(record.id, record.document, record.metadata, vector))
    if run:
        store.upsert_vectors(target, str(run_session), run)
    kinds = [kind for kind, _, _ in parsed.vectors]
    return ImportReceipt(
        group_id=target,
        source_group_id=source_group,
        source_model=source_model,
        reembedded=not reuse and bool(records),
        sessions=len(sessions),
        messages=len(messages),
        episodes=kinds.count("episode"),
        summaries=kinds.count("summary"),
        vectors=len(records),
    )


def _check_conflicts(store: ChromaStore, group_id: str, messages: list[StoredMessage]) -> None:
    by_session: dict[str, list[StoredMessage]] = {}
    for stored in messages:
        by_session.setdefault(stored.session_id, []).append(stored)
    conflicts = []
    for session_id, items in by_session.items():
        existing = store.get_messages(group_id, session_id, [s.message.id for s in items])
        conflicts += [
            s.message.id
            for s in items
            if s.message.id in existing and existing[s.message.id].message.content != s.message.content
        ]
    if conflicts:
        raise ConflictError(
            "the group already holds these message ids with other content", details={"ids": conflicts[:20]}
        )
