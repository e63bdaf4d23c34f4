"""The audit trail of a group: who changed its memory, when, how, and which ids — never what was said.

One record per change in the group's log (kind ``audit``): adds (one per batch that stored
something), flushes, corrections, redactions, deletes, imports, summaries and re-embeddings. An entry
holds its time, the actor (an API key's name or id, never its secret; ``local`` in local mode), the
action, the session and at most ``MAX_TARGETS`` target ids with their full count; never a message's
or an episode's text, a title, metadata or a correction's reason. A retention sweep's entry is its receipt:
the sessions it touched as targets, and ``counts`` and ``ids`` per kind (messages, episodes and summaries
erased, episodes and summaries repaired, sessions), at most ``MAX_TARGETS`` ids of each kind, with
``ids_left_out`` saying how many the cap left out.

The trail is the group's data: it lives in the group's log, so deleting the group deletes it, and
a delete erases the ids it removed from every entry (they read ``ERASED``; the counts stay), so the
trail keeps no more of a deleted message, episode or session than the data folder does. The one exception is
the proof of retention: a sweep's own entry keeps the ids it erased (ids only, never content); a later
delete of a session or an episode it names erases them there too. It is
bounded: at most ``LIMIT`` entries per group are kept, the oldest are dropped first (checked every
``PRUNE_EVERY`` entries a process writes to the group, so a group may briefly hold up to
``LIMIT + PRUNE_EVERY``). Export does not carry it; an import is itself an entry of the group it
writes to.

An entry is written after the change it describes has happened (a delete's, before its erasure). If
that write fails, the change stands and its answer is given: the failure is logged as an error and
counted (``AuditTrail.failures``), never turned into a failure of the change (which would tell a
caller that a committed change did not happen, and would skip a delete's erasure).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from memory.errors import InvalidInputError
from memory.models import UtcDatetime
from memory.store.protocols import LogWriter
from memory.timeutil import from_epoch

log = logging.getLogger("epimem.audit")

KIND = "audit"
LIMIT = 10_000
PRUNE_EVERY = 100
MAX_TARGETS = 100
MAX_PAGE = 500
LOCAL_ACTOR = "local"
ERASED = "(erased)"  # in place of an id that a delete removed
_PREFIX = "audit-"


class AuditAction(StrEnum):
    ADD = "add"
    FLUSH = "flush"
    CORRECT = "correct"
    REDACT = "redact"
    DELETE_MESSAGE = "delete_message"
    DELETE_EPISODE = "delete_episode"
    DELETE_SESSION = "delete_session"
    IMPORT = "import"
    SUMMARISE = "summarise"
    REEMBED = "reembed"
    RETENTION_SWEEP = "retention_sweep"


class AuditEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="the entry's id; entries sort by it, newest last")
    at: UtcDatetime
    actor: str = Field(description="the API key's name or id (never its secret); 'local' in local mode")
    action: AuditAction
    session_id: str | None = None
    target_ids: list[str] = Field(default_factory=list, description=f"at most {MAX_TARGETS} ids")
    target_count: int = Field(default=0, description="how many ids the change touched (target_ids may be cut)")
    counts: dict[str, int] = Field(
        default_factory=dict, description="a retention sweep: how many of each kind it erased (or repaired)"
    )
    ids: dict[str, list[str]] = Field(
        default_factory=dict, description=f"a retention sweep: the ids of each kind, at most {MAX_TARGETS} of each"
    )
    ids_left_out: int = Field(default=0, description="ids of `ids` left out by that cap")


class AuditPage(BaseModel):
    entries: list[AuditEntry] = Field(description="newest first")
    next_cursor: str | None = None


class AuditTrail:
    def __init__(self, log: LogWriter, *, limit: int = LIMIT, prune_every: int = PRUNE_EVERY) -> None:
        self._log = log
        self.limit = limit
        self._prune_every = prune_every
        self._written: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.failures = 0  # entries (or rewrites) that could not be written

    @contextmanager
    def _tolerated(self, what: str) -> Iterator[None]:
        """A write of the trail that fails is logged and counted; the change it describes stands."""
        try:
            yield
        except Exception:  # any store failure: see the module docstring (logged, counted, never silent)
            with self._lock:
                self.failures += 1
            log.exception("audit trail: %s not written; the change itself stands", what)

    def record(
        self,
        group_id: str,
        action: AuditAction,
        actor: str,
        *,
        session_id: str | None = None,
        targets: Sequence[str] = (),
        receipt: Mapping[str, Sequence[str]] | None = None,
    ) -> AuditEntry:
        """``receipt``: kind -> ids, a retention sweep's (kept as ``counts`` and capped ``ids``)."""
        now = time.time_ns()
        kinds = receipt or {}
        entry = AuditEntry(
            id=f"{_PREFIX}{now:020d}-{secrets.token_hex(4)}",
            at=from_epoch(now / 1e9),
            actor=actor,
            action=action,
            session_id=session_id,
            target_ids=list(targets[:MAX_TARGETS]),
            target_count=len(targets),
            counts={kind: len(ids) for kind, ids in kinds.items()},
            ids={kind: list(ids[:MAX_TARGETS]) for kind, ids in kinds.items()},
            ids_left_out=sum(max(0, len(ids) - MAX_TARGETS) for ids in kinds.values()),
        )
        with self._tolerated(f"the {action.value} entry"):
            self._log.put_record(group_id, entry.id, entry.model_dump_json(), {"kind": KIND})
        with self._lock:
            self._written[group_id] += 1
            due = self._written[group_id] % self._prune_every == 0
        if due:
            with self._tolerated("pruning"):
                self.prune(group_id)
        return entry

    def forget(self, group_id: str, ids: set[str]) -> int:
        """Replace ``ids`` by ``ERASED`` in every entry that names them (a delete removed them); returns
        how many entries were rewritten. The caller erases the old versions from disk afterwards."""
        if not ids:
            return 0
        rewritten = 0
        with self._tolerated("forgetting deleted ids"):
            rewritten = self._forget(group_id, ids)
        return rewritten

    def _forget(self, group_id: str, ids: set[str]) -> int:
        rewritten = 0
        for record_id, document, metadata in self._log.records(group_id, KIND):
            entry = AuditEntry.model_validate_json(document)
            named = {*entry.target_ids, *(i for kind in entry.ids.values() for i in kind)}
            if entry.session_id not in ids and not ids.intersection(named):
                continue
            scrubbed = entry.model_copy(
                update={
                    "session_id": ERASED if entry.session_id in ids else entry.session_id,
                    "target_ids": [ERASED if i in ids else i for i in entry.target_ids],
                    "ids": {kind: [ERASED if i in ids else i for i in found] for kind, found in entry.ids.items()},
                }
            )
            self._log.put_record(group_id, record_id, scrubbed.model_dump_json(), dict(metadata))
            rewritten += 1
        return rewritten

    def prune(self, group_id: str) -> int:
        """Drop the oldest entries beyond ``limit``; returns how many."""
        ids = sorted(i for i, _, _ in self._log.records(group_id, KIND))
        extra = ids[: max(0, len(ids) - self.limit)]
        return self._log.delete_records(group_id, extra) if extra else 0

    def page(self, group_id: str, *, limit: int = 50, cursor: str | None = None) -> AuditPage:
        """Newest first; ``cursor`` is the ``next_cursor`` of the page before."""
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}")
        if cursor is not None and not cursor.startswith(_PREFIX):
            raise InvalidInputError("invalid audit cursor")
        rows = sorted(((i, d) for i, d, _ in self._log.records(group_id, KIND)), reverse=True)
        if cursor is not None:
            rows = [(i, d) for i, d in rows if i < cursor]
        page = [AuditEntry.model_validate_json(d) for _, d in rows[:limit]]
        return AuditPage(entries=page, next_cursor=page[-1].id if len(rows) > limit else None)
