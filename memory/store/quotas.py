"""The limits every Chroma call of epimem stays within: Chroma Cloud's published quotas ("Quotas & Limits"),
kept on every deployment (embedded, a ``chroma run`` server, a distributed Chroma, Chroma Cloud), so that a
folder or a server can move to any of them as it is. ``memory.store.bounded`` keeps the counts (records per
write, results per read, calls in flight per collection), ``memory.store.record_format`` the sizes (documents,
metadata values, keys, ids)."""

from __future__ import annotations

RECORDS_PER_WRITE = 300  # ids in one add, upsert, update or delete
RESULTS_PER_READ = 300  # records one get or query returns
DOCUMENT_BYTES = 16_384  # a record's document, UTF-8
METADATA_VALUE_BYTES = 4_096  # one record metadata value (a string, UTF-8)
METADATA_KEYS = 32  # keys of one record's metadata
METADATA_KEY_BYTES = 36
ID_BYTES = 128  # a record id, UTF-8
COLLECTION_NAME_BYTES = 128
COLLECTION_VALUE_BYTES = 256  # one collection metadata value
WHERE_PREDICATES = 8
CONCURRENT_READS = 10  # calls in flight per collection
CONCURRENT_WRITES = 10
RECORDS_PER_COLLECTION = 5_000_000


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))
