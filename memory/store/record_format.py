"""How a record's text and metadata are written into Chroma and read back (the record format), and the
earlier formats it still reads. ``memory.store.parts`` cuts a payload longer than one document into pieces.

The format (tests/benchmarks/record_format.py measures it against the earlier ones):

- the record's text (an episode's content, a message, a session's or group's JSON) and the metadata keys
  written once with the record and never filtered on nor updated in place (PACKED) go together into its
  *payload*, the JSON ``[text, packed keys]``, behind STAMP_WIDTH hex digits of the time of the write;
  ``kind``, ``session_id``, ``ts``, ``state``, ``episode_id``, ``boundary`` and ``summarised_by`` stay keys of
  their own, for ``where`` clauses and in-place updates (Chroma stores and indexes each key as a row of its own);
- a stamped payload that fits in one metadata value (``quotas.METADATA_VALUE_BYTES``, Chroma Cloud's 4,096
  bytes: most records) is that value, under BODY_KEY, and the record has no document: Chroma also indexes
  every document in a trigram full-text table that epimem never queries (a partition's write costs half as
  much again with its records' payloads as documents); a longer one is the record's document (at most
  ``quotas.DOCUMENT_BYTES``, 16,384 bytes), and a longer one still is cut into a head and pieces
  (``memory.store.parts``). Chroma indexes every string it stores, documents included, in one SQLite index
  ordered by key and value: a value that begins with the time of its write lands at the end of it, where the
  last write left the pages in memory, not on a random page (~7 ms less per partition at 10,000 partitions);
- a message's vector record carries its text only as far as one document holds it (``fitted_text``; the log
  keeps every message whole).

A record written again in the other layout (its text grew or shrank) keeps what the first write left where an
upsert merges: the value or document with the later stamp is the record's. Earlier formats, read as they are
beside new records (nothing is migrated): the text as the document and every key on its own (the first); the
text under TEXT_KEY and the packed keys under PACKED_KEY (the second); the stamped payload under BODY_KEY
whatever its length (the third, written until records had to fit Chroma Cloud's quotas).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memory.store.quotas import DOCUMENT_BYTES, METADATA_VALUE_BYTES, utf8_bytes

STAMP_WIDTH = 16
BODY_KEY = "body"  # a stamped payload of at most METADATA_VALUE_BYTES (the third format's of any length)
TEXT_KEY = "text"  # the second format's
PACKED_KEY = "fields"  # the second format's
PARTS_KEY = "parts"  # a head's pieces: "<count>:<token>" (memory.store.parts)
DOCUMENT_KEY = "chroma:document"  # where Chroma's write log keeps a record's document
SECOND_FORMAT_KEYS = (TEXT_KEY, PACKED_KEY)
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
    """Chroma's ``add``/``upsert`` arguments for records (without their embeddings): each stamped payload under
    BODY_KEY when it fits in a metadata value, else as the record's document however long (None: the record has
    none; ``memory.store.parts`` writes the two kinds apart and cuts long documents). ``overwrite`` (an upsert
    only): the records may exist, in this or an earlier format, with another text (a correction, a redaction, an
    updated session), and an upsert merges what it writes into what a record holds: the other layout's field is
    emptied (an empty document, BODY_KEY set to None) and the second format's keys set to None, or the old text
    would stay."""
    documents: list[str | None] = []
    stored: list[dict[str, Any] | None] = []
    written_at = stamp()
    for text, metadata in zip(texts, metadatas, strict=True):
        kept, packed = packed_apart(metadata)
        stamped = written_at + payload(text, packed)
        if len(stamped) * 4 <= METADATA_VALUE_BYTES or utf8_bytes(stamped) <= METADATA_VALUE_BYTES:
            kept[BODY_KEY] = stamped
            documents.append("" if overwrite else None)
        else:
            documents.append(stamped)
            if overwrite:
                kept[BODY_KEY] = None
        if overwrite:
            kept.update(dict.fromkeys(SECOND_FORMAT_KEYS))
        stored.append(kept or None)  # Chroma takes no empty metadata
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
    in_document = stamped_payload(document)
    if in_document is not None and (body is None or str(document)[:STAMP_WIDTH] > str(body)[:STAMP_WIDTH]):
        found.update(in_document[1])
        return in_document[0], found
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
