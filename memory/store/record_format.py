"""How a record's text and metadata are written into Chroma and read back (the record format), and the
earlier formats it still reads. ``memory.store.parts`` cuts a payload longer than one document into pieces.

The format (tests/benchmarks/record_format.py measures it against the earlier ones):

- the record's text (an episode's content, a message, a session's or group's JSON) and the metadata keys
  written once with the record and never filtered on nor updated in place (PACKED) go together into its
  *payload*, the JSON ``[text, packed keys]``; ``kind``, ``session_id``, ``ts``, ``state``, ``episode_id``,
  ``boundary`` and ``summarised_by`` stay keys of their own, for ``where`` clauses and in-place updates
  (Chroma stores and indexes each key as a row of its own);
- the payload is the record's document, behind STAMP_WIDTH hex digits of the time of the write: Chroma
  indexes every string it stores in one SQLite index ordered by key and value, and a value that begins
  with its text lands on a random page of it, one that begins with the time at its end, where the last
  write left the pages in memory (~7 ms less per partition at 10,000 partitions);
- a document holds at most ``quotas.DOCUMENT_BYTES`` (Chroma Cloud's quota), a metadata value at most
  ``METADATA_VALUE_BYTES``: a longer payload is cut into pieces (``memory.store.parts``), and a message's
  vector record carries its text only as far as one document holds (``fitted_text``; the log keeps it whole).

Earlier formats, read as they are beside new records (nothing is migrated): the text as the document and
every key on its own (the first); the text under TEXT_KEY and the packed keys under PACKED_KEY (the second);
the stamped payload in one metadata value, BODY_KEY (the third). A document that is a stamped payload is
this format's (an upsert merges metadata, so a record written again keeps an earlier format's keys: the
document, written last, is what counts); the others are told apart by their keys.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memory.store.quotas import DOCUMENT_BYTES, utf8_bytes

STAMP_WIDTH = 16
BODY_KEY = "body"  # the third format's
TEXT_KEY = "text"  # the second format's
PACKED_KEY = "fields"  # the second format's
PARTS_KEY = "parts"  # a head's pieces: "<count>:<token>" (memory.store.parts)
DOCUMENT_KEY = "chroma:document"  # where Chroma's write log keeps a record's document
LEGACY_KEYS = (BODY_KEY, TEXT_KEY, PACKED_KEY)
PACKED = frozenset(
    {
        "group_id",
        "message_id",
        "title",
        "created",
        "content_type",
        "generation",
        "message_count",
        "source_ids",
        "producer_id",
        "produced_for_id",
        "user_metadata",
        "source_episode_ids",
        "period_start",
        "period_end",
        "role",
        "meta",
        "received",
        "seq",
    }
)  # never "kind", "session_id", "ts" (filters), "state", "episode_id", "boundary", "summarised_by" (updated)
_STAMPED = re.compile(r"[0-9a-f]{16}\[")


def packed_apart(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record's metadata as the keys kept on their own and those packed (PACKED)."""
    kept = {key: value for key, value in metadata.items() if key not in PACKED}
    return kept, {key: value for key, value in metadata.items() if key in PACKED}


def payload(text: str, packed: Mapping[str, Any]) -> str:
    return json.dumps([text, packed], ensure_ascii=False, separators=(",", ":"))


def stamp() -> str:
    return f"{time.time_ns():0{STAMP_WIDTH}x}"


def written(
    ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], *, overwrite: bool = False
) -> dict[str, Any]:
    """Chroma's ``add``/``upsert`` arguments for records (without their embeddings): each document the whole
    stamped payload, however long (``memory.store.parts`` cuts it). ``overwrite`` (an upsert only): the records
    may exist in an earlier format with another text (a correction, a redaction, an updated session), and an
    upsert merges the metadata it writes into what a record holds: the earlier formats' keys are set to None
    (removed), or the old text would stay."""
    documents: list[str] = []
    stored: list[dict[str, Any] | None] = []
    written_at = stamp()
    for text, metadata in zip(texts, metadatas, strict=True):
        kept, packed = packed_apart(metadata)
        documents.append(written_at + payload(text, packed))
        if overwrite:
            kept.update(dict.fromkeys(LEGACY_KEYS))
        stored.append(kept or None)  # Chroma takes no empty metadata (a registry record's keys are all packed)
    return {"ids": list(ids), "documents": documents, "metadatas": stored}


def stamped_payload(document: str | None) -> tuple[str, dict[str, Any]] | None:
    """The text and packed keys of a stamped payload, or None for any other document (the first format's text;
    a record rewritten from the first format may still hold that format's keys, so they cannot tell)."""
    if not document or _STAMPED.match(document) is None:
        return None
    try:
        found = json.loads(document[STAMP_WIDTH:])
    except json.JSONDecodeError:
        return None
    if not (isinstance(found, list) and len(found) == 2 and isinstance(found[0], str) and isinstance(found[1], dict)):
        return None
    return found[0], found[1]


def read_back(document: str | None, metadata: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """A record's text and its metadata, as they were written (from what Chroma returns, with a head's pieces
    joined: ``memory.store.parts``)."""
    found = dict(metadata or {})
    found.pop(PARTS_KEY, None)
    body = found.pop(BODY_KEY, None)
    text = found.pop(TEXT_KEY, None)
    packed = found.pop(PACKED_KEY, None)
    written_now = stamped_payload(document)
    if written_now is not None:
        found.update(written_now[1])
        return written_now[0], found
    if body is not None:
        text, fields = json.loads(str(body)[STAMP_WIDTH:])
        found.update(fields)
        return str(text), found
    if packed is not None:
        found.update(json.loads(packed))
    return (document or "") if text is None else str(text), found


def rows_of(found: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The records of a Chroma ``get`` result (documents and metadatas included): id, text, metadata."""
    ids = list(found["ids"])
    documents = found.get("documents") or [None] * len(ids)
    metadatas = found.get("metadatas") or [None] * len(ids)
    return [(i, *read_back(d, m)) for i, d, m in zip(ids, documents, metadatas, strict=True)]


def unstamped(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A record as Chroma's write log keeps it (its document under DOCUMENT_KEY), without the time of its write
    and the token of its pieces: the same text written again is the same record."""
    found = dict(metadata)
    for key in (BODY_KEY, DOCUMENT_KEY):
        value = found.get(key)
        if isinstance(value, str) and (key == BODY_KEY or _STAMPED.match(value)):
            found[key] = value[STAMP_WIDTH:]
    if isinstance(found.get(PARTS_KEY), str):
        found[PARTS_KEY] = str(found[PARTS_KEY]).split(":", 1)[0]
    return found


def fitted_text(text: str, packed: Mapping[str, Any]) -> str:
    """The longest beginning of ``text`` whose stamped payload fits in one document (all of it when it fits)."""
    room = DOCUMENT_BYTES - STAMP_WIDTH
    if utf8_bytes(payload(text, packed)) <= room:
        return text
    low, high = 0, len(text)  # the payload of text[:low] fits, that of text[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if utf8_bytes(payload(text[:middle], packed)) <= room:
            low = middle
        else:
            high = middle
    return text[:low]
