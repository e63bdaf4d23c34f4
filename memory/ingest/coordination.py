"""Who may form a session's episodes right now: one thread in a process, one process in a cluster.

Episode formation reads a session's pending messages, cuts them into segments and writes the
plan (message -> episode id). Two formers working from different snapshots of the pending set
would cut differently and make overlapping episodes, so formation (and session deletion) must
be exclusive per session:

- ``LocalCoordinator``: a thread lock per session. Enough for one process (the embedded
  Chroma ``PersistentClient`` is single-process anyway).
- ``LeaseCoordinator``: the thread lock plus a lease stored in Chroma itself, so that several
  epimem servers sharing one Chroma server need nothing else to agree.

The lease relies on one property of Chroma, checked by the tests on both backends: ``add`` of an
id that already exists is ignored, so the first writer of an id wins and everybody reads back
the same winner. A session's lease is a chain of records ``lease-<session>-<epoch>`` in the
group's log collection. To acquire, a node reads the highest epoch; if it is released or
expired it adds epoch + 1 and reads back: it holds the lease if its record is the highest one.
Only the holder writes its own record (renewal, release); old epochs are removed by the next
holder. A holder renews every ``ttl / 3`` in the background; a holder that finds a newer epoch
(it stalled past expiry) marks itself lost, and the formation checks ``verify`` before writing,
so it stops instead of writing a competing plan.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from memory.errors import StoreUnavailableError
from memory.locks import SessionLocks
from memory.store.protocols import LeaseLog

log = logging.getLogger("epimem.coordination")


class SessionBusyError(StoreUnavailableError):
    """Another server holds the session's formation lease for longer than we may wait."""

    code = "session_busy"


class LeaseLostError(StoreUnavailableError):
    """This server's lease expired during a formation (it stalled); the formation stops unwritten."""

    code = "lease_lost"


def default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Coordinator(Protocol):
    """Exclusive access to sessions for formation and deletion."""

    @property
    def distributed(self) -> bool:
        """True when other processes may write the same sessions."""
        ...

    def hold(self, sessions: Sequence[tuple[str, str]]) -> Any:
        """A context manager holding every session in ``sessions`` (taken in a fixed order)."""
        ...

    def verify(self, sessions: Sequence[tuple[str, str]]) -> None:
        """Raise ``LeaseLostError`` if exclusivity over any of ``sessions`` was lost."""
        ...


class LocalCoordinator:
    """Thread locks per session: exclusive within this process."""

    def __init__(self) -> None:
        self.locks = SessionLocks()

    @property
    def distributed(self) -> bool:
        return False

    def hold(self, sessions: Sequence[tuple[str, str]]) -> Any:
        # A fixed order: two formations over overlapping session sets cannot deadlock.
        return self.locks.hold(sessions)

    def verify(self, sessions: Sequence[tuple[str, str]]) -> None:
        return None


@dataclass(frozen=True)
class LeaseRecord:
    epoch: int
    owner: str
    expires: float
    released: bool


class _HeldLease:
    def __init__(self, group_id: str, session_id: str, epoch: int, token: str) -> None:
        self.group_id = group_id
        self.session_id = session_id
        self.epoch = epoch
        self.token = token
        self.lost = False
        self.active = True
        self.lock = threading.Lock()  # renewal and release never interleave


class LeaseCoordinator:
    """Thread locks plus a lease per session in the shared Chroma store (see the module notes)."""

    def __init__(
        self,
        store: LeaseLog,
        *,
        node_id: str | None = None,
        ttl_s: float = 30.0,
        wait_s: float = 120.0,
        poll_s: float = 0.05,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: the time leases expire by (epoch seconds, shared by every server; tests move it)."""
        self._store = store
        self._clock = clock
        self._node_id = node_id or default_node_id()
        self._ttl = ttl_s
        self._wait = wait_s
        self._poll = poll_s
        self._local = LocalCoordinator()
        self._held: dict[tuple[str, str], _HeldLease] = {}
        self._held_guard = threading.Lock()
        self._renewer_stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def distributed(self) -> bool:
        return True

    @property
    def node_id(self) -> str:
        return self._node_id

    @contextmanager
    def hold(self, sessions: Sequence[tuple[str, str]]) -> Iterator[None]:
        with ExitStack() as stack:
            for key in sorted(set(sessions)):
                stack.enter_context(self._local.locks.lock(key))
                lease = self._acquire(*key)
                stack.callback(self._release, lease)
            yield

    def verify(self, sessions: Sequence[tuple[str, str]]) -> None:
        """Read the leases back: a holder that stalled past its expiry must not write."""
        with self._held_guard:
            held = [self._held[key] for key in sessions if key in self._held]
        for lease in held:
            if not lease.lost:
                records = self._records(lease.group_id, lease.session_id)
                top = max(records, key=lambda r: r.epoch, default=None)
                lease.lost = top is None or (top.epoch, top.owner) != (lease.epoch, lease.token)
            if lease.lost:
                raise LeaseLostError("this server lost a session's formation lease; the formation will be retried")

    def close(self) -> None:
        self._renewer_stop.set()

    # -- the lease protocol ------------------------------------------------------------------------

    def _records(self, group_id: str, session_id: str) -> list[LeaseRecord]:
        return [
            LeaseRecord(
                epoch=int(meta["epoch"]),
                owner=str(meta["owner"]),
                expires=float(meta["expires"]),
                released=bool(meta.get("released", False)),
            )
            for meta in self._store.lease_records(group_id, session_id)
        ]

    def _acquire(self, group_id: str, session_id: str) -> _HeldLease:
        token = f"{self._node_id}:{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + self._wait
        delay = self._poll
        while True:
            records = self._records(group_id, session_id)
            top = max(records, key=lambda r: r.epoch, default=None)
            if top is None or top.released or top.expires < self._clock():
                epoch = top.epoch + 1 if top is not None else 0
                self._write(group_id, session_id, epoch, token, insert=True)
                after = self._records(group_id, session_id)
                winner = max(after, key=lambda r: r.epoch)
                if winner.epoch == epoch and winner.owner == token:
                    stale = [r.epoch for r in after if r.epoch < epoch]
                    if stale:
                        self._store.delete_leases(group_id, session_id, stale)
                    if top is not None and not top.released:
                        log.warning("took over an expired formation lease of %s", top.owner.split(":")[0])
                    return self._register(_HeldLease(group_id, session_id, epoch, token))
                mine = [r for r in after if r.epoch == epoch and r.owner == token]
                if mine:  # re-created a removed old epoch: give it up
                    self._write(group_id, session_id, epoch, token, released=True)
            if time.monotonic() > deadline:
                raise SessionBusyError(
                    "another server is forming this session's episodes; retry later",
                    retry_after=max(1, int(self._ttl / 3)),
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _write(
        self, group_id: str, session_id: str, epoch: int, token: str, *, insert: bool = False, released: bool = False
    ) -> None:
        metadata = {
            "epoch": epoch,
            "owner": token,
            "expires": self._clock() + (0.0 if released else self._ttl),
            "released": released,
        }
        self._store.put_lease(group_id, session_id, epoch, metadata, insert=insert)

    def _register(self, lease: _HeldLease) -> _HeldLease:
        with self._held_guard:
            self._held[(lease.group_id, lease.session_id)] = lease
            if self._renewer is None or not self._renewer.is_alive():
                self._renewer = threading.Thread(target=self._renew_loop, name="epimem-lease-renewer", daemon=True)
                self._renewer.start()
        return lease

    def _release(self, lease: _HeldLease) -> None:
        with self._held_guard:
            self._held.pop((lease.group_id, lease.session_id), None)
        with lease.lock:
            lease.active = False
            if lease.lost:
                return
            try:
                self._write(lease.group_id, lease.session_id, lease.epoch, lease.token, released=True)
            except StoreUnavailableError as error:  # it expires by itself
                log.warning("could not release a formation lease: %s", error.message)

    def _renew_loop(self) -> None:
        while not self._renewer_stop.wait(self._ttl / 3):
            with self._held_guard:
                held = list(self._held.values())
            for lease in held:
                try:
                    self._renew(lease)
                except StoreUnavailableError as error:
                    log.warning("could not renew a formation lease: %s", error.message)

    def _renew(self, lease: _HeldLease) -> None:
        with lease.lock:
            if not lease.active:
                return
            records = self._records(lease.group_id, lease.session_id)
            top = max(records, key=lambda r: r.epoch, default=None)
            if top is None or top.epoch != lease.epoch or top.owner != lease.token:
                lease.lost = True
                log.warning("lost a formation lease (this server stalled past its expiry)")
                return
            self._write(lease.group_id, lease.session_id, lease.epoch, lease.token)
