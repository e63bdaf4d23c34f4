"""Large reads and writes in pieces, within Chroma Cloud's quotas (``memory.store.quotas``): the page every read
of many records goes through, the batch a write of many records is cut into, and listings (of a collection's
ids, of a database's collections) a page at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from memory.errors import StoreUnavailableError
from memory.store.quotas import RECORDS_PER_WRITE, RESULTS_PER_READ

# Records per read: Chroma Cloud returns at most 300. (Chroma also keeps much of what one large read allocated:
# a group index of 20,000 records read in pages of 5,000 left the process 312 MB larger after the pages were
# freed, in pages of 1,000 90 MB; partitions.py data, docs/benchmarks-speed.md.)
PAGE = RESULTS_PER_READ
WRITE_BATCH = RECORDS_PER_WRITE  # records per Chroma write
LISTING_TRIES = 5  # listings started again because entries were deleted under them


def listed(page: Callable[[int, int], list[str]], what: str, size: int = PAGE) -> list[str]:
    """Everything ``page(offset, limit)`` lists, ``size`` at a time. Chroma lists records (and collections) in the
    order they were first written, so a delete before the cursor would shift an entry out of both pages:
    each page starts at the last entry of the one before, and a listing whose pages do not meet starts again."""
    for _ in range(LISTING_TRIES):
        found: list[str] = []
        while True:
            entries = page(max(len(found) - 1, 0), size)
            if found and (not entries or entries[0] != found[-1]):
                break  # the pages do not meet: something before the cursor was deleted
            found += entries[1:] if found else entries
            if len(entries) < size:
                return found
    raise StoreUnavailableError(f"{what} kept changing while they were listed", retry_after=1)


def list_ids(collection: Any, where: Any = None) -> list[str]:
    """The ids of a collection's records that match ``where`` (all of them without it), in pages of the
    collection's ``listing_page`` (PAGE for a plain Chroma collection)."""

    def page(offset: int, limit: int) -> list[str]:
        return list(collection.get(where=where, limit=limit, offset=offset, include=[])["ids"])

    return listed(page, f"records of {collection.name}", getattr(collection, "listing_page", PAGE))


def collections_of(client: Any) -> list[Any]:
    """Every collection of a client's database, as Chroma lists them."""
    found: dict[str, Any] = {}

    def page(offset: int, limit: int) -> list[str]:
        listed_now = client.list_collections(limit=limit, offset=offset)
        found.update((collection.name, collection) for collection in listed_now)
        return [collection.name for collection in listed_now]

    return [found[name] for name in listed(page, "collections")]


def pages(collection: Any, include: list[Any], **kwargs: Any) -> Iterator[Any]:
    """Every record matching ``kwargs`` (``where``), one ``get`` result of up to PAGE records at a time.

    The matching ids are listed first, then read PAGE ids at a time: reading whole records by offset made
    Chroma filter and skip again for every page (a log of 63,000 records: 12.2 s with ``where``, 6.2 s
    without, 3.2 s by ids)."""
    ids = list_ids(collection, kwargs.get("where"))
    for start in range(0, len(ids), PAGE):
        yield collection.get(ids=ids[start : start + PAGE], include=include)
