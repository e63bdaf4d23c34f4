"""The epimem JSON Lines export format, version 1, and its reader (which checks a whole file).

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
6. ``{"type": "revision", "session_id", "episode_id", "revision": Revision}`` per stored revision
   of a corrected episode (memory.lifecycle.revisions), oldest first; the end record counts them
   (``"revisions"``) when there are any
7. ``{"type": "end", "counts": {...}}``: what the file holds; a file without it is truncated

Importing validates the whole file before writing anything, and refuses a file with more lines of a
kind than ``MAX_LINES`` allows (413, naming the kind and the bound). What an import may add, and what it
refuses, is memory.lifecycle.importing's.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from memory.errors import EpimemError, InvalidInputError, PayloadTooLargeError
from memory.ids import GROUP_SUMMARY_SESSION, check_scope_id
from memory.json_lines import one_line
from memory.lifecycle.revisions import Revision
from memory.models import Episode, EpisodeType, GroupConfiguration, SessionInfo, StoredMessage
from memory.store.quotas import ID_BYTES, utf8_bytes

FORMAT = "epimem-export"
VERSION = 1
# At most this many lines of each kind in one file (an export of a larger group is refused with 413).
MAX_LINES = {
    "session": 50_000,
    "message": 1_000_000,
    "message_vector": 1_000_000,
    "episode": 200_000,
    "summary": 50_000,
    "revision": 10_000,
}


def model_identity(model_id: str) -> dict[str, Any]:
    """``name:dimension:fingerprint`` (the embedder's model_id) as a record."""
    name, dimension, fingerprint = model_id.rsplit(":", 2) if model_id.count(":") >= 2 else (model_id, "0", "")
    return {
        "id": model_id,
        "name": name,
        "dimension": int(dimension) if dimension.isdigit() else 0,
        "fingerprint": fingerprint,
    }


def line(record: dict[str, Any]) -> str:
    """One record of the file: a JSON object on one line for any line reader (memory.json_lines)."""
    return one_line(json.dumps(record, ensure_ascii=False, separators=(",", ":"))) + "\n"


@dataclass
class ExportContents:
    """A validated export file, ready to be written."""

    header: dict[str, Any]
    config: GroupConfiguration | None
    sessions: list[SessionInfo]
    messages: list[StoredMessage]
    vectors: list[tuple[str, Episode | tuple[str, str], list[float] | None]]
    revisions: list[tuple[str, str, Revision]] = field(default_factory=list)  # session, episode, revision
    first_lines: dict[str, int] = field(default_factory=dict)  # kind -> the line number of its first line
    counts: Counter[str] = field(default_factory=Counter)  # kind -> lines

    @property
    def group_id(self) -> str:
        return str(self.header["group_id"])

    @property
    def session_ids(self) -> list[str]:
        return sorted({info.session_id for info in self.sessions} | {m.session_id for m in self.messages})


def read_export(lines: Iterable[str]) -> ExportContents:
    """Parse and validate a whole export; raises InvalidInputError naming the first bad line."""
    parsed = ExportContents({}, None, [], [], [])
    end: dict[str, Any] | None = None
    places: dict[int, int] = {}  # id() of a parsed record -> its line number
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if end is not None:
            raise InvalidInputError(f"line {number}: content after the end record")
        try:
            item = json.loads(raw)
            if not isinstance(item, dict):
                raise InvalidInputError(f"line {number}: not a JSON object")
            if not parsed.header:
                parsed.header = _header(item, number)
            elif item.get("type") == "end":
                end = item
            else:
                _add_record(parsed, item, number, places)
        except EpimemError:
            raise
        except RecursionError:
            raise InvalidInputError(f"line {number}: nested too deeply to read") from None
        except (ValueError, KeyError, TypeError, ValidationError) as error:
            raise InvalidInputError(f"line {number}: {error}") from error
    if not parsed.header:
        raise InvalidInputError("the file is empty")
    if end is None:
        raise InvalidInputError("the file is truncated: it has no end record")
    kinds = [kind for kind, _, _ in parsed.vectors]
    found = {"sessions": len(parsed.sessions), "messages": len(parsed.messages)}
    found |= {"episodes": kinds.count(EpisodeType.EPISODE), "summaries": kinds.count(EpisodeType.SUMMARY)}
    found["message_vectors"] = kinds.count("message_vector")
    if parsed.revisions:
        found["revisions"] = len(parsed.revisions)
    if end.get("counts") != found:
        raise InvalidInputError("the file does not hold what its end record counts", details={"found": found})
    _check_unique(parsed)
    _check_citations(parsed, places)
    return parsed


def _check_unique(parsed: ExportContents) -> None:
    """Each session, message, episode or summary, and message vector once."""
    kinds: dict[str, list[Any]] = {
        "session": [info.session_id for info in parsed.sessions],
        "message": [(m.session_id, m.message.id) for m in parsed.messages],
        "episode or summary": [item.uuid for _, item, _ in parsed.vectors if isinstance(item, Episode)],
        "message vector": [item for _, item, _ in parsed.vectors if not isinstance(item, Episode)],
    }
    for kind, keys in kinds.items():
        seen: set[Any] = set()
        repeated = [key for key in keys if key in seen or seen.add(key)]  # type: ignore[func-returns-value]
        if repeated:
            raise InvalidInputError(
                f"the file holds the same {kind} twice", details={"ids": [str(key)[:300] for key in repeated[:20]]}
            )


def _header(item: dict[str, Any], number: int) -> dict[str, Any]:
    if item.get("type") != "header" or item.get("format") != FORMAT:
        raise InvalidInputError(f"line {number}: not an {FORMAT} file (the first line must be its header)")
    if item.get("version") != VERSION:
        raise InvalidInputError(f"unsupported {FORMAT} version {item.get('version')!r}; this is {VERSION}")
    check_scope_id(str(item.get("group_id", "")))
    if not isinstance(item.get("embedding_model"), dict):
        raise InvalidInputError("the header does not name the embedding model")
    return item


def _add_record(parsed: ExportContents, item: dict[str, Any], number: int, places: dict[int, int]) -> None:
    """One line after the header into ``parsed``."""
    kind = item.get("type")
    if isinstance(kind, str) and kind in MAX_LINES:
        parsed.counts[kind] += 1
        parsed.first_lines.setdefault(kind, number)
        if item.get("embedding") is not None:
            parsed.first_lines.setdefault("embedding", number)
        if parsed.counts[kind] > MAX_LINES[kind]:
            raise PayloadTooLargeError(
                f"line {number}: an import holds at most {MAX_LINES[kind]} {kind} lines",
                details={"line": number, "kind": kind, "max_lines": MAX_LINES[kind]},
            )
    if kind == "group":
        parsed.config = GroupConfiguration.model_validate(item["config"])
    elif kind == "session":
        parsed.sessions.append(_not_reserved(SessionInfo.model_validate(item["session"]), number))
    elif kind == "message":
        parsed.messages.append(_not_reserved(StoredMessage.model_validate(item["record"]), number))
    elif kind in (EpisodeType.EPISODE, EpisodeType.SUMMARY):
        episode = Episode.model_validate(item["episode"])
        if utf8_bytes(episode.uuid) > ID_BYTES:  # the id of its record in Chroma
            raise InvalidInputError(
                f"line {number}: an episode id is at most {ID_BYTES} bytes", details={"line": number}
            )
        if episode.episode_type.value != kind:
            raise InvalidInputError(f"line {number}: a {kind} line holds a {episode.episode_type.value}")
        if kind == EpisodeType.EPISODE:
            _not_reserved(episode, number)
        parsed.vectors.append((kind, episode, _embedding(item, number)))
        places[id(episode)] = number
    elif kind == "message_vector":
        ref = (check_scope_id(str(item["session_id"])), str(item["message_id"]))
        parsed.vectors.append((kind, ref, _embedding(item, number)))
    elif kind == "revision":
        revision = Revision.model_validate(item["revision"])
        parsed.revisions.append((check_scope_id(str(item["session_id"])), str(item["episode_id"]), revision))
    else:
        raise InvalidInputError(f"line {number}: unknown record type {kind!r}")


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
        if kind != EpisodeType.EPISODE or not isinstance(record, Episode):
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
