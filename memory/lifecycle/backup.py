"""The backup file: a whole server's (or one group's) collections as Chroma holds them, in one file.

Gzip-compressed JSON Lines, one JSON object per line, versioned and checksummed::

    {"type": "header", "format": "epimem-backup", "version": 1, "created_at": ..., "embedding_model": ...,
     "scope": "server" | "group", "group_id": null | "..."}
    {"type": "group", "group_id": "...", "read_at": ...}            each group, read at one moment
    {"type": "collection", "name": "epm-l-...", "metadata": {...}}  each of its collections
    {"type": "records", "records": [[id, document, metadata, vector], ...]}   up to PAGE records a line
    ...
    {"type": "end", "groups": G, "collections": C, "records": R, "sha256": "..."}

``vector`` is the base64 of the record's float32 values (little-endian); ``sha256`` is the digest of
every byte before the end line (uncompressed). A reader checks the whole file (format, version, every
line's shape, the counts and the digest) before a restore writes anything.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from memory.errors import InvalidInputError
from memory.store.dump import RawRecord
from memory.timeutil import utc_now

FORMAT = "epimem-backup"
VERSION = 1
RECORDS_PER_LINE = 1000


@dataclass
class BackupSummary:
    """What a backup holds."""

    scope: str
    group_id: str | None
    embedding_model: str
    created_at: str
    groups: list[str] = field(default_factory=list)
    collections: int = 0
    records: int = 0
    sha256: str = ""


def _vector(embedding: np.ndarray) -> str:
    return base64.b64encode(np.asarray(embedding, dtype="<f4").tobytes()).decode("ascii")


def _unvector(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4").astype(np.float32)


class BackupWriter:
    """Writes a backup into a binary file, group by group; ``close`` writes the end line."""

    def __init__(self, out: IO[bytes], *, embedding_model: str, group_id: str | None = None) -> None:
        self._zip = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0)
        self._digest = hashlib.sha256()
        scope = "server" if group_id is None else "group"
        self.summary = BackupSummary(scope, group_id, embedding_model, utc_now().isoformat())
        self._line(
            {
                "type": "header",
                "format": FORMAT,
                "version": VERSION,
                "created_at": self.summary.created_at,
                "embedding_model": embedding_model,
                "scope": scope,
                "group_id": group_id,
            }
        )

    def _line(self, value: dict[str, Any]) -> None:
        data = (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        self._digest.update(data)
        self._zip.write(data)

    def group(self, group_id: str, read_at: str, collections: Sequence[tuple[str, dict[str, Any], list[RawRecord]]]):
        self._line({"type": "group", "group_id": group_id, "read_at": read_at})
        self.summary.groups.append(group_id)
        for name, metadata, records in collections:
            self._line({"type": "collection", "name": name, "metadata": metadata})
            self.summary.collections += 1
            for start in range(0, len(records), RECORDS_PER_LINE):
                rows = [
                    [r.id, r.document, r.metadata, _vector(r.embedding)]
                    for r in records[start : start + RECORDS_PER_LINE]
                ]
                self._line({"type": "records", "records": rows})
                self.summary.records += len(rows)

    def close(self) -> BackupSummary:
        self.summary.sha256 = self._digest.hexdigest()
        end = {
            "type": "end",
            "groups": len(self.summary.groups),
            "collections": self.summary.collections,
            "records": self.summary.records,
            "sha256": self.summary.sha256,
        }
        self._zip.write((json.dumps(end) + "\n").encode("utf-8"))
        self._zip.close()
        return self.summary


@dataclass(frozen=True)
class CollectionPart:
    """Records of one collection of one group (a collection may come in several parts)."""

    group_id: str
    name: str
    metadata: dict[str, Any]
    records: list[RawRecord]


def _bad(message: str) -> InvalidInputError:
    return InvalidInputError(f"not a usable epimem backup: {message}")


def _lines(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    try:
        with gzip.open(path, "rb") as stream:
            for number, data in enumerate(stream, start=1):
                try:
                    value = json.loads(data)
                except (UnicodeDecodeError, json.JSONDecodeError):
                    raise _bad(f"line {number} is not JSON") from None
                if not isinstance(value, dict) or not isinstance(value.get("type"), str):
                    raise _bad(f"line {number} has no type")
                yield data, value
    except (OSError, EOFError, zlib.error) as error:  # not gzip, or cut short
        raise _bad(f"the file cannot be read whole ({type(error).__name__})") from None


def _records(value: dict[str, Any]) -> list[RawRecord]:
    try:
        return [
            RawRecord(str(record_id), document, dict(metadata or {}), _unvector(vector))
            for record_id, document, metadata, vector in value["records"]
        ]
    except (KeyError, TypeError, ValueError) as error:
        raise _bad(f"a records line is malformed ({type(error).__name__})") from None


def check_backup(path: Path) -> BackupSummary:
    """The backup's summary once every line has been read and checked (nothing is written)."""
    digest = hashlib.sha256()
    summary: BackupSummary | None = None
    end: dict[str, Any] | None = None
    in_collection = False
    for data, value in _lines(path):
        if end is not None:
            raise _bad("lines after the end line")
        kind = value["type"]
        if summary is None:
            if kind != "header" or value.get("format") != FORMAT:
                raise _bad("it does not start with an epimem-backup header")
            if value.get("version") != VERSION:
                raise _bad(f"version {value.get('version')!r}; this epimem reads version {VERSION}")
            scope, group_id = value.get("scope"), value.get("group_id")
            summary = BackupSummary(
                str(scope), group_id, str(value.get("embedding_model")), str(value.get("created_at"))
            )
        elif kind == "group":
            summary.groups.append(str(value["group_id"]))
            in_collection = False
        elif kind == "collection":
            if not summary.groups or not isinstance(value.get("metadata"), dict):
                raise _bad("a collection outside a group")
            summary.collections += 1
            in_collection = True
        elif kind == "records":
            if not in_collection:
                raise _bad("records outside a collection")
            summary.records += len(_records(value))
        elif kind == "end":
            end = value
            continue
        else:
            raise _bad(f"unknown line type {kind!r}")
        digest.update(data)
    if summary is None or end is None:
        raise _bad("it is empty or cut short (no end line)")
    counts = (len(summary.groups), summary.collections, summary.records)
    if counts != (end.get("groups"), end.get("collections"), end.get("records")):
        raise _bad("its counts do not match its end line")
    if digest.hexdigest() != end.get("sha256"):
        raise _bad("its checksum does not match (the file was changed or damaged)")
    summary.sha256 = digest.hexdigest()
    return summary


def read_parts(path: Path) -> Iterator[CollectionPart]:
    """The collections of a backup that ``check_backup`` passed, in file order, a part at a time."""
    group_id, name, metadata = "", "", {}
    for _, value in _lines(path):
        kind = value["type"]
        if kind == "group":
            group_id = str(value["group_id"])
        elif kind == "collection":
            name, metadata = str(value["name"]), dict(value["metadata"])
            yield CollectionPart(group_id, name, metadata, [])
        elif kind == "records":
            yield CollectionPart(group_id, name, metadata, _records(value))
