"""A group read whole, page by page, for the read model (``memory.readmodel``): its index's records (with their
vectors when asked), its log's messages, its configuration and sessions, and the group's shared stamp.

Each method is one store call: a read of a big group is many calls, so an engine restart or an erasure waits
for a page, not for the whole group, and a page that meets a restart is read again with fresh handles. Pages
are listed by id first (``memory.store.paging``): a write landing between two pages never shifts a record out
of both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chromadb.errors
import httpx
import numpy as np

from memory.errors import EpimemError
from memory.models import GroupConfiguration, Message, SessionInfo
from memory.store import codec, versions
from memory.store.calls import StorePart, store_call

# What a read of the store can raise besides a bug: the store unavailable (a 503 after retries), a collection
# gone under the reader, Chroma refusing a read; a background reader logs them and stops.
READ_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    ConnectionError,
    TimeoutError,
    chromadb.errors.ChromaError,
    EpimemError,
)


@dataclass(frozen=True)
class IndexPage:
    """Records of a group index in stored order: ids, documents, metadatas and (when asked) their vectors,
    float32, one row per record."""

    ids: list[str]
    documents: list[str]
    metadatas: list[dict[str, Any]]
    vectors: np.ndarray | None = None


class GroupReads(StorePart):
    @store_call
    def count(self, group_id: str) -> int:
        """Records in the group index."""
        index = self._collections.vectors(group_id)
        return index.count() if index is not None else 0

    @store_call
    def dimension(self, group_id: str) -> int:
        """The length of the group index's vectors, read from one record (0: none)."""
        index = self._collections.vectors(group_id)
        first = index.get(limit=1, include=["embeddings"])["embeddings"] if index is not None else None
        return len(first[0]) if first is not None and len(first) else 0

    @store_call
    def index_ids(self, group_id: str) -> list[str]:
        index = self._collections.vectors(group_id)
        return list(index.get(include=[])["ids"]) if index is not None else []

    @store_call
    def index_page(self, group_id: str, ids: Sequence[str], *, vectors: bool) -> IndexPage | None:
        """The records of ``ids`` (None when the index is gone)."""
        index = self._collections.vectors(group_id)
        if index is None:
            return None
        include: list[Any] = ["documents", "metadatas"] + (["embeddings"] if vectors else [])
        page = index.get(ids=list(ids), include=include)
        rows = codec.rows_of(page)
        found = IndexPage([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        if vectors and page["ids"]:
            return IndexPage(found.ids, found.documents, found.metadatas, np.asarray(page["embeddings"], np.float32))
        return found

    @store_call
    def group_records(self, group_id: str) -> tuple[GroupConfiguration | None, list[SessionInfo]] | None:
        """The group's configuration and its sessions (by creation), from its log (None: no log)."""
        log = self._collections.log(group_id, create=False)
        if log is None:
            return None
        found = codec.rows_of(log.get(ids=[codec.GROUP_RECORD_ID], include=["documents", "metadatas"]))
        config = GroupConfiguration.model_validate_json(found[0][1]) if found else None
        rows = self._collections.rows(log, where={"kind": "session"})
        sessions = sorted(
            (SessionInfo.model_validate_json(document) for _, document, _ in rows),
            key=lambda info: (info.created_at, info.session_id),
        )
        return config, sessions

    @store_call
    def log_ids(self, group_id: str) -> list[str]:
        """The ids of every record of the group's log, of every kind (``messages`` keeps the messages): a filtered
        listing costs Chroma a scan of the log for each page (memory.store.paging), an unfiltered one a skip to
        the page."""
        log = self._collections.log(group_id, create=False)
        return list(log.get(include=[])["ids"]) if log is not None else []

    @store_call
    def messages(self, group_id: str, ids: Sequence[str]) -> dict[str, Message]:
        """Log record id -> message, of those ids that are messages."""
        log = self._collections.log(group_id, create=False)
        if log is None:
            return {}
        page = log.get(ids=list(ids), include=["documents", "metadatas"])
        return {
            record_id: codec.stored_from_log(group_id, document, metadata).message
            for record_id, document, metadata in codec.rows_of(page)
            if metadata.get("kind") == "message"
        }

    @store_call
    def stamp(self, group_id: str) -> str | None:
        """The group's shared stamp (``memory.store.versions``; None without one)."""
        return versions.shared_stamp(self._collections, group_id)
