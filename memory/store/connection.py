"""The Chroma client of a process, and how embedded Chroma is kept within a memory bound.

Embedded Chroma (chromadb 1.x, Rust bindings) keeps every vector index it has loaded in memory:
~2.7 MB per collection touched, never released, and it reads none of the old cache settings
(``chroma_segment_cache_policy``, ``chroma_memory_limit_bytes``). Its own index-cache bound is
unsafe in 1.5.9: an evicted index that was never synced to disk (Chroma syncs after 1,000 writes)
is reloaded without the writes since, so reads fail with "Nothing found on disk" or return vectors
that were deleted (measured, see the README). A process restart, on the other hand, replays Chroma's
write log and is correct.

So the connection restarts the embedded engine itself: it counts the collections used since the
engine started and, once more than ``recycle_after`` were touched, waits for the calls in flight,
stops the engine, hands the freed memory back to the operating system (``malloc_trim``) and starts
the engine again on the same folder; indexes reload from disk on their next use. Every store call runs inside
``ChromaConnection.call`` (shared), a restart runs alone (exclusive). With a Chroma server the
memory lives in the server's process and nothing is restarted.

A new data folder keeps the partitions (``epm-p-*``) in an engine of their own on ``chroma-partitions``,
beside ``chroma`` (registry, groups' logs and indexes); each engine counts and restarts alone, so
touching partitions no longer reloads a big group's index (~6 ms of CPU per 1,000 vectors). A folder
written before (a ``chroma`` database, no ``chroma-partitions``) keeps its one engine.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import chromadb
from chromadb.api import ClientAPI
from chromadb.config import Settings as ChromaSettings

from memory.engine.allocator import bound_arenas, fill_fresh_memory, return_freed_memory
from memory.engine.erasure import DATABASE, ErasureReport, Stamp, erase, zero_all_index_slack
from memory.engine.folder_lock import lock_folder
from memory.engine.write_log_index import index_write_log
from memory.locks import ReadersWriterLock
from memory.store.bounded import CollectionSlots
from memory.store.changes import ChangeFeed
from memory.store.codec import PARTITION_PREFIX
from memory.store.deployment import Deployment, connect
from memory.store.paging import PAGE

PARTITIONS_FOLDER = "chroma-partitions"  # beside ``chroma``: the partitions' engine (new folders)


class Engine:
    """One Chroma client: a server's, or an embedded engine on one folder (``stop``: restartable)."""

    def __init__(
        self,
        start: Callable[[], ClientAPI],
        stop: Callable[[], None] | None = None,
        path: Path | None = None,
        *,
        stop_opened: Callable[[set[str]], None] | None = None,
    ) -> None:
        self.start, self.stop = start, stop  # stop: a full stop (erasure, close), every saved index looked at
        self.stop_opened = stop_opened  # a stop told which collections the engine opened since it started
        self.path = path if stop is not None else None
        self.touched: set[str] = set()  # collections used since this engine (re)started
        self.client = start()

    def restart(self) -> None:
        assert self.stop is not None
        opened, self.touched = self.touched, set()
        self.stop_opened(opened) if self.stop_opened is not None else self.stop()
        self.client = self.start()


class ChromaConnection:
    """One Chroma client with a bounded cache of collection handles, restartable when embedded."""

    def __init__(
        self,
        start: Callable[[], ClientAPI],
        *,
        stop: Callable[[], None] | None = None,
        recycle_after: int = 0,
        max_open: int = 256,
        path: Path | None = None,
        partitions: Engine | None = None,
        stop_opened: Callable[[set[str]], None] | None = None,
        slots: CollectionSlots | None = None,
        listing_page: int = PAGE,
    ) -> None:
        self.path = path if stop is not None else None  # the embedded folder; None with a server
        self.slots = slots or CollectionSlots()  # Chroma calls in flight per collection (memory.store.bounded)
        self.listing_page = listing_page  # records a page of a listing asks for (memory.store.paging)
        self._stop = stop
        self.recycle_after = recycle_after if stop is not None else 0
        self._max_open = max_open
        self._gate = ReadersWriterLock()  # store calls shared, an engine restart or erasure exclusive
        self._lock = threading.Lock()
        self._handles: OrderedDict[str, Any] = OrderedDict()  # name -> RecordCollection
        self.feed = ChangeFeed()  # what this process's writes did, per group (memory.store.changes)
        self.run_id = uuid.uuid4().hex[:16]  # this process's key in the groups' shared stamps (memory.store.versions)
        self._stamped: set[str] = set()
        self.stamp_registry: Any = None  # the registry's own handle for the shared stamps (memory.store.versions)
        self.restarts = 0
        self._main = Engine(start, stop, path, stop_opened=stop_opened)
        self._partitions = partitions  # None: the partitions live in the main engine (a server, an older folder)

    @property
    def client(self) -> ClientAPI:
        """The main engine's client: the registry, the groups' logs and indexes (and, with a server or
        a folder written before the partitions had an engine of their own, everything)."""
        return self._main.client

    @property
    def engines(self) -> list[Engine]:
        return [self._main] if self._partitions is None else [self._main, self._partitions]

    def _engine(self, name: str) -> Engine:
        if self._partitions is not None and name.startswith(PARTITION_PREFIX):
            return self._partitions
        return self._main

    def client_for(self, name: str) -> ClientAPI:
        """The client of the engine that holds the collection ``name`` (counted as used by it)."""
        engine = self._engine(name)
        with self._lock:
            engine.touched.add(name)
        return engine.client

    @property
    def shared(self) -> bool:
        """Whether other processes may write the same data (a Chroma server); embedded Chroma is one
        process per folder (memory.engine.folder_lock)."""
        return self._stop is None

    def first_stamp(self, group_id: str) -> bool:
        """True the first time this process stamps the group (memory.store.versions)."""
        with self._lock:
            if group_id in self._stamped:
                return False
            self._stamped.add(group_id)
            return True

    @contextmanager
    def call(self) -> Iterator[ClientAPI]:
        """Run one store call (calls never nest); restarts the engine after it if the bound was passed."""
        with self._gate.shared():
            yield self.client
        if self._due():
            self.restart()

    @property
    def touched(self) -> int:
        """Collections used since the engines (re)started."""
        with self._lock:
            return sum(len(engine.touched) for engine in self.engines)

    def _due_engines(self) -> list[Engine]:
        if not self.recycle_after:
            return []
        with self._lock:
            return [engine for engine in self.engines if len(engine.touched) > self.recycle_after]

    def _due(self) -> bool:
        return bool(self._due_engines())

    def restart(self) -> bool:
        """Stop and start each embedded engine past its bound once no call is in flight; False if
        none is (any more)."""
        if self._stop is None:
            return False
        with self._gate.exclusive():
            due = self._due_engines()
            if not due:
                return False  # another thread restarted it while this one waited
            for engine in due:
                with self._lock:
                    for name in [name for name in self._handles if self._engine(name) is engine]:
                        del self._handles[name]
                engine.restart()
                self.restarts += 1
            return_freed_memory()
        return True

    def erase(self, names: Iterable[str] = ()) -> ErasureReport | None:
        """Alone on the embedded engine: rebuild the named collections that exist, stop the engine,
        scrub its folder (memory.engine.erasure), start it again. None with a Chroma server."""
        if self._stop is None or self.path is None:
            return None
        wanted = list(names)
        total = ErasureReport()
        with self._gate.exclusive():
            with self._lock:
                self._handles.clear()
            for engine in self.engines:
                assert engine.stop is not None and engine.path is not None
                engine.touched.clear()
                mine = [name for name in wanted if self._engine(name) is engine]
                engine.client, report = erase(
                    engine.client, engine.path, stop=engine.stop, start=engine.start, names=mine
                )
                self.restarts += 1
                total.add(report)
        return total

    def handle(self, name: str, opener: Callable[[ClientAPI], Any]) -> Any:
        """The cached handle of a collection, or ``opener(client)``'s (cached if not None)."""
        with self._lock:
            cached = self._handles.get(name)
            if cached is not None:
                self._handles.move_to_end(name)
                self._engine(name).touched.add(name)
                return cached
        collection = opener(self._engine(name).client)
        if collection is None:
            return None
        with self._lock:
            self._handles[name] = collection
            self._engine(name).touched.add(name)
            while len(self._handles) > self._max_open:
                self._handles.popitem(last=False)
        return collection

    def forget(self, names: Iterable[str] | None = None) -> None:
        """Drop cached handles (all of them, or the named ones)."""
        with self._lock:
            for name in list(self._handles) if names is None else names:
                self._handles.pop(name, None)

    def cached(self) -> list[str]:
        with self._lock:
            return list(self._handles)


_EMBEDDED: dict[str, ChromaConnection] = {}
_EMBEDDED_LOCK = threading.Lock()
_ZEROED: dict[str, dict[str, Stamp]] = {}  # folder -> the indexes whose slack was zeroed, as they were then


def open_connection(
    *,
    data_dir: Path,
    host: str | None,
    port: int = 8000,
    ssl: bool = False,
    timeout_s: float = 10.0,
    recycle_after: int = 0,
    max_open: int = 256,
    deployment: Deployment | None = None,
    slots: CollectionSlots | None = None,
    listing_page: int = PAGE,
) -> ChromaConnection:
    """A connection to a Chroma deployment if a host is given (``deployment``: its tenant, database and token;
    memory.store.deployment), else the process's embedded Chroma under ``data_dir/chroma`` (one connection per
    folder, shared: a restart must reach every user). ``slots``: the Chroma calls in flight per collection;
    ``listing_page``: the records a page of a listing asks for (memory.store.paging)."""
    if host:
        reached = deployment or Deployment(host=host, port=port, ssl=ssl, timeout_s=timeout_s)
        client = connect(reached)  # the start's checks, once
        return ChromaConnection(lambda: client, max_open=max_open, slots=slots, listing_page=listing_page)
    lock_folder(Path(data_dir))  # one process per embedded folder; the caller releases it (release_folder)
    fill_fresh_memory()
    bound_arenas()
    path = (Path(data_dir) / "chroma").resolve()
    with _EMBEDDED_LOCK:
        connection = _EMBEDDED.get(str(path))
        if connection is None:
            partitions = (Path(data_dir) / PARTITIONS_FOLDER).resolve()
            apart = partitions.exists() or not (path / DATABASE).exists()  # a folder written before: one engine
            path.mkdir(parents=True, exist_ok=True)
            index_write_log(path)  # before the engine starts (memory.engine.write_log_index)
            connection = ChromaConnection(
                lambda: _embedded_client(path),
                stop=lambda: _stop_embedded(str(path)),
                stop_opened=lambda opened: _stop_embedded(str(path), opened),
                recycle_after=recycle_after,
                max_open=max_open,
                path=path,
                partitions=_partitions_engine(partitions) if apart else None,
                slots=slots,
                listing_page=listing_page,
            )
            _EMBEDDED[str(path)] = connection
        else:  # the folder is already open in this process: the tighter bounds win
            bounds = [b for b in (connection.recycle_after, recycle_after) if b]
            connection.recycle_after = min(bounds, default=0)
        return connection


def _embedded_client(path: Path) -> ClientAPI:
    settings = ChromaSettings(anonymized_telemetry=False, is_persistent=True, persist_directory=str(path))
    return chromadb.PersistentClient(path=str(path), settings=settings)


def _partitions_engine(path: Path) -> Engine:
    path.mkdir(parents=True, exist_ok=True)
    index_write_log(path)
    return Engine(
        lambda: _embedded_client(path),
        lambda: _stop_embedded(str(path)),
        path,
        stop_opened=lambda opened: _stop_embedded(str(path), opened),
    )


def _stop_embedded(path: str, opened: set[str] | None = None) -> None:
    """Stop the embedded engine of a folder; chromadb starts a new one for the next client.
    ``opened``: the collections it opened since it started (only their indexes can have been saved)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    system = SharedSystemClient._identifier_to_system.pop(path, None)
    SharedSystemClient._identifier_to_refcount.pop(path, None)
    if system is not None:
        system.stop()
        # what the engine wrote from uninitialised buffers; indexes it did not save are skipped
        first = path not in _ZEROED  # the process's first stop looks at every index
        zero_all_index_slack(Path(path), _ZEROED.setdefault(path, {}), names=None if first else opened)
        index_write_log(Path(path))  # a new folder's database exists now


def close_embedded(data_dir: Path) -> bool:
    """Stop the process's embedded engine on ``data_dir/chroma`` and forget its connection, as a
    process exit would (the next ``open_connection`` starts a new engine); False if none was open."""
    path = str((Path(data_dir) / "chroma").resolve())
    with _EMBEDDED_LOCK:
        connection = _EMBEDDED.pop(path, None)
    if connection is None:
        return False
    for engine in connection.engines:
        _stop_embedded(str(engine.path))
        _ZEROED.pop(str(engine.path), None)  # another process may write the folder next
    return True
