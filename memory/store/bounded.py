"""Every Chroma call within the quotas (``memory.store.quotas``): a Chroma collection as the store calls it.

- A write of more than ``RECORDS_PER_WRITE`` records goes in batches, one call each. Chroma applies a call
  whole; a write of several batches is not atomic, which every store write allows: each is idempotent by id
  and written again whole by its retry or the recovery.
- A read by more ids than ``RESULTS_PER_READ`` goes in pages. A read by filter (or of everything) lists the
  matching ids a page at a time (``limit``/``offset``), then reads them by id: reading whole records by
  offset made Chroma filter and skip again for every page (a log of 63,000 records: 12.2 s with ``where``,
  3.2 s by ids); ``memory.store.paging.listed`` keeps a listing whole while records are deleted.
- A query asks for at most ``RESULTS_PER_READ`` records.
- At most ``reads`` reads and ``writes`` writes of one collection are in flight in this process
  (``CollectionSlots``; Chroma Cloud allows 10 of each per collection).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from memory.background import yield_to_searches
from memory.store.paging import list_ids
from memory.store.quotas import (
    CONCURRENT_READS,
    CONCURRENT_WRITES,
    ID_BYTES,
    RECORDS_PER_WRITE,
    RESULTS_PER_READ,
    utf8_bytes,
)
from memory.store.where import matches, understood

T = TypeVar("T")
FIELDS = ("ids", "embeddings", "documents", "metadatas")


class CollectionSlots:
    """Chroma calls in flight per collection, reads and writes counted apart. A collection's semaphore lives
    while a call holds it: a process that touches a million collections keeps none of them idle."""

    def __init__(self, *, reads: int = CONCURRENT_READS, writes: int = CONCURRENT_WRITES) -> None:
        if reads < 1 or writes < 1:
            raise ValueError("at least one read and one write per collection")
        self.reads, self.writes = reads, writes
        self._lock = threading.Lock()
        self._held: dict[tuple[str, bool], tuple[threading.Semaphore, int]] = {}

    @contextmanager
    def hold(self, name: str, *, write: bool) -> Iterator[None]:
        key = (name, write)
        with self._lock:
            found = self._held.get(key)
            semaphore = found[0] if found else threading.Semaphore(self.writes if write else self.reads)
            self._held[key] = (semaphore, (found[1] if found else 0) + 1)
        try:
            with semaphore:
                yield
        finally:
            with self._lock:
                semaphore, users = self._held[key]
                if users == 1:
                    del self._held[key]
                else:
                    self._held[key] = (semaphore, users - 1)

    def users(self, name: str, *, write: bool = False) -> int:
        """Calls of a collection in flight or waiting for a slot."""
        with self._lock:
            found = self._held.get((name, write))
            return found[1] if found else 0

    def in_use(self) -> int:
        """Collections with a call in flight (or waiting)."""
        with self._lock:
            return len({name for name, _ in self._held})


def batches(count: int, size: int) -> Iterator[slice]:
    for start in range(0, count, size):
        yield slice(start, start + size)


DEFAULT_INCLUDE = ("metadatas", "documents")


class BoundedCollection:
    """A Chroma collection whose every call stays within the quotas (the module's docstring)."""

    def __init__(self, collection: Any, slots: CollectionSlots, *, listing_page: int = RESULTS_PER_READ) -> None:
        self.chroma = collection  # the chromadb Collection
        self._slots = slots
        self.listing_page = listing_page  # records a page of a listing asks for (memory.store.paging.list_ids)

    @property
    def name(self) -> str:
        return str(self.chroma.name)

    @property
    def metadata(self) -> dict[str, Any] | None:
        return self.chroma.metadata  # type: ignore[no-any-return]

    @property
    def configuration(self) -> Any:
        return self.chroma.configuration

    def _call(self, call: Callable[[], T], *, write: bool) -> T:
        if write:
            yield_to_searches()  # memory.background: a background write does not hold a search up
        with self._slots.hold(self.name, write=write):
            return call()

    # -- reads ------------------------------------------------------------------------------------------

    def count(self) -> int:
        return self._call(self.chroma.count, write=False)

    def list_ids(self, where: Any = None) -> list[str]:
        """The ids of every record matching ``where`` (of every record without it), a page at a time."""
        return list_ids(self, where)

    def get(
        self,
        ids: Sequence[str] | None = None,
        where: Any = None,
        *,
        limit: int | None = None,
        offset: int | None = None,
        include: Sequence[str] = DEFAULT_INCLUDE,
    ) -> dict[str, Any]:
        """Chroma's ``get``: records by id (and ``where``), or every record matching ``where``, in pages; with
        ``limit`` (at most ``RESULTS_PER_READ``), one page of them."""
        wanted = list(include)
        if limit is not None:
            if limit > max(RESULTS_PER_READ, self.listing_page):
                raise ValueError(f"a read returns at most {RESULTS_PER_READ} records, not {limit}")
            return self._get(where=where, limit=limit, offset=offset, include=wanted)
        if ids is None:
            listed = self.list_ids(where)
            if not wanted:
                return {"ids": listed, "included": []}
            ids, where = listed, None
        ids = possible(ids)
        if not ids:
            return empty(wanted)
        if where is not None and understood(where):  # memory.store.where: the filter applied here, not by Chroma
            read = wanted if "metadatas" in wanted else [*wanted, "metadatas"]
            return kept(self._by_ids(ids, read), lambda metadata: matches(metadata, where), wanted)
        return self._by_ids(ids, wanted, where)

    def _by_ids(self, ids: list[str], include: list[str], where: Any = None) -> dict[str, Any]:
        if len(ids) <= RESULTS_PER_READ:
            return self._get(ids=ids, where=where, include=include)
        return merged(
            [self._get(ids=ids[part], where=where, include=include) for part in batches(len(ids), RESULTS_PER_READ)]
        )

    def _get(self, **arguments: Any) -> dict[str, Any]:
        return dict(self._call(lambda: self.chroma.get(**arguments), write=False))

    def query(
        self, *, query_embeddings: Any, n_results: int, where: Any = None, include: Sequence[str]
    ) -> dict[str, Any]:
        if n_results > RESULTS_PER_READ:
            raise ValueError(f"a query returns at most {RESULTS_PER_READ} records, not {n_results}")
        return dict(
            self._call(
                lambda: self.chroma.query(
                    query_embeddings=query_embeddings, n_results=n_results, where=where, include=list(include)
                ),
                write=False,
            )
        )

    # -- writes -----------------------------------------------------------------------------------------

    def _write(self, method: str, columns: dict[str, Any]) -> None:
        count = len(columns["ids"])
        if method in ("add", "upsert") and len(possible(columns["ids"])) < count:
            raise ValueError(f"record ids are at most {ID_BYTES} bytes")
        write = getattr(self.chroma, method)
        for part in batches(count, RECORDS_PER_WRITE):
            batch = {key: (value[part] if value is not None else None) for key, value in columns.items()}
            self._call(functools.partial(write, **batch), write=True)

    def add(self, **columns: Any) -> None:
        self._write("add", columns)

    def upsert(self, **columns: Any) -> None:
        self._write("upsert", columns)

    def update(self, **columns: Any) -> None:
        """Chroma's ``update`` (it never creates a record: the rows of ids no record can have are left out)."""
        ids = list(columns["ids"])
        kept = set(possible(ids))
        if len(kept) < len(ids):
            rows = [i for i, record_id in enumerate(ids) if record_id in kept]
            columns = {key: None if value is None else [value[i] for i in rows] for key, value in columns.items()}
        if columns["ids"]:
            self._write("update", columns)

    def delete(self, ids: Sequence[str]) -> None:
        wanted = possible(ids)
        if wanted:
            self._write("delete", {"ids": wanted})

    def modify(self, **changes: Any) -> None:
        self._call(lambda: self.chroma.modify(**changes), write=True)


def possible(ids: Sequence[str]) -> list[str]:
    """The ids a record can have (at most ID_BYTES): a longer one names no record, and is not sent to Chroma."""
    return [i for i in ids if len(i) * 4 <= ID_BYTES or utf8_bytes(i) <= ID_BYTES]


def empty(include: Sequence[str]) -> dict[str, Any]:
    """A ``get`` result without records."""
    return {"ids": [], "included": list(include), **{field: [] if field in include else None for field in FIELDS[1:]}}


def kept(result: dict[str, Any], keep: Callable[[Any], bool], include: Sequence[str]) -> dict[str, Any]:
    """A ``get`` result with only the records whose metadata ``keep`` accepts, and only the ``include``d fields (the
    metadatas read to decide are dropped when they were not asked for)."""
    positions = [i for i, metadata in enumerate(result.get("metadatas") or []) if keep(metadata)]
    filtered: dict[str, Any] = {"included": list(include)}
    for field in FIELDS:
        values = result.get(field)
        if field != "ids" and field not in include:
            filtered[field] = None
        elif values is None:
            filtered[field] = None
        elif isinstance(values, np.ndarray):
            filtered[field] = values[positions] if positions else np.array([])  # what Chroma gives for none
        else:
            filtered[field] = [values[i] for i in positions]
    return filtered


def merged(pages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ``get`` results as one."""
    if len(pages) == 1:
        return pages[0]
    result: dict[str, Any] = {"included": pages[0].get("included", [])}
    for field in FIELDS:
        found = [page.get(field) for page in pages]
        values = [value for value in found if value is not None]
        if len(values) < len(found):
            result[field] = None
        elif field == "embeddings":
            arrays = [np.asarray(value) for value in values if len(value)]
            result[field] = np.concatenate(arrays) if arrays else np.zeros((0, 0))
        else:
            result[field] = [item for value in values for item in value]
    return result
