"""Records longer than one document: a head and its pieces.

A record whose stamped payload (``memory.store.record_format``) is longer than ``quotas.DOCUMENT_BYTES`` keeps
its first piece as its document (the *head*) and the others in *pieces*: records of the group's log (a log
record's pieces in its own log; those of an episode's or a summary's vector record in the log of its group:
partitions and indexes hold nothing but vectors). A payload is cut at UTF-8 character boundaries, each piece
behind the stamp of the write. A piece's id derives from its head's id, a token of the payload (16 hex digits
of its digest: the same text written again has the same pieces, and the partition's and the index's record of
an episode share theirs) and its number; the head names their count and the token under ``PARTS_KEY``
("<count>:<token>"); a piece's metadata names its head (``part_of``) and its head's session, so that a
session's deletion takes its pieces with it.

- Writing: pieces first, then heads, so a reader never meets a head without its pieces. An upsert writes
  records again unchanged; a rewrite (the text may have changed: a correction, a redaction) reads first which
  heads it replaces have pieces (one read by id, of the records that may have them: any log record, the vector
  record of an episode or a summary; a message's vector record never has any) and deletes their pieces once
  the new heads are written. An add (the first writer of an id wins) reads back the heads it wrote with pieces
  and deletes its pieces where another writer's head won.
- Reading: a head's pieces are read by id and joined (a head replaced meanwhile is read again); pieces are
  never handed out as records.
- Deleting a head deletes its pieces.

Two rewrites of one record at the same moment (two servers updating one session's record) can leave the pieces
of the one that lost unnamed by any head until the session or group is deleted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from memory.errors import StoreUnavailableError
from memory.store.bounded import DEFAULT_INCLUDE, BoundedCollection, CollectionSlots
from memory.store.paging import PAGE
from memory.store.quotas import DOCUMENT_BYTES
from memory.store.record_format import PARTS_KEY, STAMP_WIDTH

PART_KIND = "part"
PART_OF_KEY = "part_of"
READ_TRIES = 3  # reads of a head whose pieces were replaced under it
PLACEHOLDER: Any = [0.0]  # a piece's vector (pieces are never searched)
Home = Callable[[bool], BoundedCollection | None]  # the collection of the pieces (created when asked), if any


def piece_id(head_id: str, token: str, number: int) -> str:
    return f"part-{hashlib.sha256(head_id.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}-{token}-{number}"


def piece_ids(head_id: str, parts: str) -> list[str]:
    """The ids of a head's pieces from its PARTS_KEY value."""
    count, token = parts.split(":", 1)
    return [piece_id(head_id, token, number) for number in range(1, int(count))]


def cut(document: str) -> list[str]:
    """A stamped document as documents of at most DOCUMENT_BYTES: the head's, then its pieces' (each behind the
    stamp), cut at UTF-8 character boundaries."""
    if len(document) * 4 <= DOCUMENT_BYTES:
        return [document]
    encoded = document.encode("utf-8", "surrogatepass")
    if len(encoded) <= DOCUMENT_BYTES:
        return [document]
    stamp, rest = encoded[:STAMP_WIDTH], encoded[STAMP_WIDTH:]
    room = DOCUMENT_BYTES - STAMP_WIDTH
    found: list[str] = []
    while rest:
        end = min(room, len(rest))
        while end < len(rest) and (rest[end] & 0xC0) == 0x80:  # not inside a character
            end -= 1
        found.append((stamp + rest[:end]).decode("utf-8", "surrogatepass"))
        rest = rest[end:]
    return found


class RecordCollection(BoundedCollection):
    """A collection of epimem's records (the module's docstring): heads joined with their pieces when read, cut
    when written, deleted with them. ``home``: where the pieces live (None: records never have any);
    ``may_have_pieces(metadata)``: whether a record written with this metadata may replace one with pieces."""

    def __init__(
        self,
        collection: Any,
        slots: CollectionSlots,
        *,
        home: Home | None = None,
        may_have_pieces: Callable[[Mapping[str, Any]], bool] = lambda _: True,
        listing_page: int = PAGE,
    ) -> None:
        super().__init__(collection, slots, listing_page=listing_page)
        self._home = home
        self._may_have_pieces = may_have_pieces if home is not None else (lambda _: False)

    def home(self, *, create: bool) -> BoundedCollection | None:
        return self._home(create) if self._home is not None else None

    # -- reads ------------------------------------------------------------------------------------------

    def get(self, ids: Sequence[str] | None = None, where: Any = None, **page: Any) -> dict[str, Any]:
        """The base's read (``page``: its ``limit``, ``offset`` and ``include``), pieces joined to their heads."""
        wanted = list(page.pop("include", DEFAULT_INCLUDE))
        if not ({"documents", "metadatas"} & set(wanted)):
            return super().get(ids=ids, where=where, include=wanted, **page)
        asked = wanted if "metadatas" in wanted else [*wanted, "metadatas"]
        found = super().get(ids=ids, where=where, include=asked, **page)
        found = _without(found, [i for i, m in enumerate(found["metadatas"]) if (m or {}).get("kind") == PART_KIND])
        if "documents" in wanted:
            for attempt in range(READ_TRIES):
                missing = self._join(found["ids"], found["documents"], found["metadatas"])
                if not missing:
                    break
                if attempt == READ_TRIES - 1:
                    raise StoreUnavailableError(f"records of {self.name} kept changing while read", retry_after=1)
                found = _read_again(found, missing, super().get(ids=[found["ids"][i] for i in missing], include=asked))
        if "metadatas" not in wanted:
            found["metadatas"] = None
        return found

    def query(
        self, *, query_embeddings: Any, n_results: int, where: Any = None, include: Sequence[str]
    ) -> dict[str, Any]:
        found = super().query(query_embeddings=query_embeddings, n_results=n_results, where=where, include=include)
        if "documents" in include and "metadatas" in include:
            for ids, documents, metadatas in zip(found["ids"], found["documents"], found["metadatas"], strict=True):
                if self._join(ids, documents, metadatas):
                    raise StoreUnavailableError(f"a record of {self.name} changed while it was read", retry_after=1)
        return found

    def _join(self, ids: Sequence[str], documents: list[Any], metadatas: list[Any]) -> list[int]:
        """Each head's pieces joined into its document (and its PARTS_KEY dropped), in place; the positions of
        heads some of whose pieces are gone (the head was replaced or deleted meanwhile)."""
        heads = [(i, piece_ids(ids[i], str(m[PARTS_KEY]))) for i, m in enumerate(metadatas) if m and m.get(PARTS_KEY)]
        if not heads:
            return []
        home = self.home(create=False)
        wanted = [piece for _, pieces in heads for piece in pieces]
        # (read as plain records: the home's own ``get`` hands no piece out)
        found = BoundedCollection.get(home, ids=wanted, include=["documents"]) if home else {"ids": [], "documents": []}
        text = dict(zip(found["ids"], found["documents"] or [], strict=True))
        missing = []
        for i, pieces in heads:
            if all(piece in text for piece in pieces):
                documents[i] = str(documents[i]) + "".join(str(text[piece])[STAMP_WIDTH:] for piece in pieces)
                metadatas[i] = {key: value for key, value in metadatas[i].items() if key != PARTS_KEY}
            else:
                missing.append(i)
        return missing

    # -- writes -----------------------------------------------------------------------------------------

    def add(self, **columns: Any) -> None:
        """Chroma's ``add`` (the first writer of an id wins); where another writer's head won, the pieces this
        write wrote belong to nobody and are deleted."""
        mine = self._put(columns, insert=True)
        if mine:
            stored = self.pieces_of(list(mine))
            self.remove_pieces([piece for head, found in mine.items() if stored.get(head) != found for piece in found])

    def upsert(self, **columns: Any) -> None:
        """Chroma's ``upsert`` of records whose text, if they exist, is the same (a record written again: its
        pieces' ids are the same too)."""
        self._put(columns, insert=False)

    def rewrite(self, *, later: bool = False, **columns: Any) -> list[str]:
        """An upsert of records whose text may have changed (a correction, a redaction, a session updated): the
        pieces of the versions it replaces are deleted once the new heads are written (``later``: returned
        instead, for the caller to delete once the record's twin in another collection is written too)."""
        ids, metadatas = columns["ids"], columns["metadatas"]
        before = self.pieces_of([i for i, m in zip(ids, metadatas, strict=True) if self._may(m)])
        after = self._put(columns, insert=False, replaced=set(before))
        stale = sorted({piece for found in before.values() for piece in found} - _all(after))
        if later:
            return stale
        self.remove_pieces(stale)
        return []

    def _may(self, metadata: Mapping[str, Any] | None) -> bool:
        return (metadata or {}).get("kind") != PART_KIND and self._may_have_pieces(metadata or {})

    def _put(
        self, columns: dict[str, Any], *, insert: bool, replaced: AbstractSet[str] = frozenset()
    ) -> dict[str, list[str]]:
        """Write records, each long document cut into a head and pieces (pieces first); ``replaced``: records
        that had pieces, whose PARTS_KEY goes where the new version has none. Returns the pieces by head."""
        ids = list(columns["ids"])
        documents = list(columns["documents"]) if columns.get("documents") is not None else None
        metadatas = [dict(m or {}) for m in columns["metadatas"]]
        pieces: dict[str, Any] = {"ids": [], "documents": [], "metadatas": []}
        mine: dict[str, list[str]] = {}
        for i, document in enumerate(documents or []):
            found = cut(document) if document is not None and len(document) * 4 > DOCUMENT_BYTES else [document]
            if len(found) == 1:
                if ids[i] in replaced:
                    metadatas[i][PARTS_KEY] = None  # removed by the upsert
                continue
            if self._home is None:
                raise ValueError(f"{self.name} holds no record longer than one document")
            assert documents is not None
            documents[i] = found[0]
            metadatas[i][PARTS_KEY] = f"{len(found)}:{_token(found)}"
            mine[ids[i]] = piece_ids(ids[i], metadatas[i][PARTS_KEY])
            session = {"session_id": metadatas[i]["session_id"]} if "session_id" in metadatas[i] else {}
            pieces["ids"] += mine[ids[i]]
            pieces["documents"] += found[1:]
            pieces["metadatas"] += [{"kind": PART_KIND, PART_OF_KEY: ids[i], **session}] * (len(found) - 1)
        if pieces["ids"]:
            home = self.home(create=True)
            assert home is not None
            home.upsert(**pieces, embeddings=[PLACEHOLDER] * len(pieces["ids"]))
        columns = {**columns, "documents": documents, "metadatas": [m or None for m in metadatas]}
        (super().add if insert else super().upsert)(**columns)
        return mine

    def pieces_of(self, ids: Sequence[str]) -> dict[str, list[str]]:
        """The piece ids of those of these records that are heads with pieces."""
        if not ids:
            return {}
        found = super().get(ids=list(ids), include=["metadatas"])
        return {
            record_id: piece_ids(record_id, str(metadata[PARTS_KEY]))
            for record_id, metadata in zip(found["ids"], found["metadatas"] or [], strict=True)
            if metadata and metadata.get(PARTS_KEY)
        }

    # -- deletes ----------------------------------------------------------------------------------------

    def remove(self, ids: Sequence[str]) -> list[str]:
        """Delete those of these records that exist, with their pieces; returns their ids."""
        wanted = list(ids)
        if not wanted:
            return []
        found = super().get(ids=wanted, include=["metadatas"])
        existing = list(found["ids"])
        if existing:
            super().delete(existing)
        pieces = [
            piece
            for record_id, metadata in zip(existing, found["metadatas"] or [], strict=True)
            if metadata and metadata.get(PARTS_KEY)
            for piece in piece_ids(record_id, str(metadata[PARTS_KEY]))
        ]
        home = self.home(create=False) if pieces else None
        if home is not None:
            home.delete(pieces)
        return existing

    def remove_where(self, where: Any) -> list[str]:
        """Delete every record matching ``where``, with their pieces; returns their ids."""
        return self.remove(self.list_ids(where))

    def delete(self, ids: Sequence[str]) -> None:
        self.remove(ids)

    def all_pieces(self) -> list[str]:
        """The ids of the pieces of every head of this collection."""
        return [piece for found in self.pieces_of(self.list_ids()).values() for piece in found]

    def remove_pieces(self, ids: Sequence[str]) -> None:
        """Delete pieces by id (those of records replaced or dropped)."""
        home = self.home(create=False) if ids else None
        if home is not None:
            home.delete(list(ids))


def _token(documents: Sequence[str]) -> str:
    """A payload's own token (its pieces without their stamps): written again unchanged, a record's pieces keep
    their ids (the partition's and the index's record of an episode share theirs)."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document[STAMP_WIDTH:].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def _all(found: Mapping[str, list[str]]) -> set[str]:
    return {piece for pieces in found.values() for piece in pieces}


def _without(found: dict[str, Any], drop: list[int]) -> dict[str, Any]:
    """A ``get`` result without the rows at ``drop``."""
    if not drop:
        return found
    gone = set(drop)
    kept = [i for i in range(len(found["ids"])) if i not in gone]
    result = dict(found)
    for key in ("ids", "documents", "metadatas", "embeddings"):
        values = found.get(key)
        if values is not None:
            result[key] = [values[i] for i in kept]
    return result


def _read_again(found: dict[str, Any], rows: list[int], again: dict[str, Any]) -> dict[str, Any]:
    """``found`` with the rows at ``rows`` as ``again`` (their records read again) holds them; those gone dropped."""
    position = {record_id: p for p, record_id in enumerate(again["ids"])}
    gone = []
    for row in rows:
        p = position.get(found["ids"][row])
        if p is None:
            gone.append(row)
            continue
        for key in ("documents", "metadatas", "embeddings"):
            if found.get(key) is not None and again.get(key) is not None:
                found[key][row] = again[key][p]
    return _without(found, gone)
