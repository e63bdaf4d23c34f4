"""The deployment's keys and group limits as one server holds them: a copy of the store's
(``memory.store.keys``), checked against the store's stamp every ``recheck_s`` seconds by a background
thread (one small read; the keys are read again only when the stamp moved). A key made, revoked or
rotated on this server counts here at once; on another server within ``recheck_s`` plus one read. A
request costs no store call: a dictionary lookup by the key's id and, once its secret has passed the
salted hash, one HMAC (``api.access.secrets.Verified``).

If the store cannot be read, the last copy stays in force (and the failure is logged); revocations made
elsewhere meanwhile count once it answers again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from api.access import secrets
from memory.errors import ConflictError, EpimemError, NotFoundError
from memory.store.keys import GroupLimits, StoredKey, hashed_group
from memory.store.protocols import KeyRecords
from memory.timeutil import utc_now

log = logging.getLogger("epimem.access")
_UNREAD = "\0unread"  # the stamp before the first read (the store's is None while it holds no key)


@dataclass(frozen=True)
class Seed:
    """A key of the keys file, to be kept in the store (hashed)."""

    secret: str
    name: str | None
    groups: tuple[str, ...]
    role: str
    expires_at: datetime | None

    @property
    def id(self) -> str:
        return secrets.key_id_of(self.secret)


class LiveKeys:
    def __init__(
        self,
        records: KeyRecords,
        *,
        recheck_s: float,
        now: Callable[[], datetime] = utc_now,
        on_refresh: Sequence[Callable[[], None]] = (),
    ) -> None:
        self._records = records
        self.recheck_s = recheck_s
        self._now = now
        self._on_refresh = list(on_refresh)
        self._stamp: str | None = _UNREAD
        self._keys: dict[str, StoredKey] = {}
        self._groups: dict[str, GroupLimits] = {}
        self._verified = secrets.Verified()
        self._write = threading.Lock()  # this server's changes, one at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the copy --------------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read the store's keys again if its stamp moved; returns whether it did."""
        if self._records.stamp() == self._stamp:
            return False
        stamp, keys, groups = self._records.read()
        self._keys, self._groups, self._stamp = {key.id: key for key in keys}, groups, stamp
        return True

    def start(self) -> None:
        """The background recheck (and whatever else should run as often: ``on_refresh``)."""
        if self._thread is None and self.recheck_s > 0:
            self._thread = threading.Thread(target=self._run, name="epimem-keys", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.recheck_s):
            for task in (self.refresh, *self._on_refresh):
                try:
                    task()
                except EpimemError as error:  # the store is away: keep the last copy, try again next time
                    log.warning("keys and usage not refreshed: %s", error.message)
                except Exception:  # the recheck must outlive any one failure, or revocations stop counting
                    log.exception("keys and usage not refreshed")

    @property
    def holds_keys(self) -> bool:
        return bool(self._keys)

    def lookup(self, presented: str) -> StoredKey | None:
        """The key whose secret this is (revoked or expired ones too: the caller says why it refuses). A
        revoked key's secret is recognised only if it passed before: no hash is checked for a dead key."""
        key = self._keys.get(secrets.key_id_of(presented))
        if key is None:
            return None
        if key.revoked_at is not None:
            return key if self._verified.known(key.id, presented, key.secret_hash) else None
        return key if self._verified.check(key.id, presented, key.secret_hash) else None

    def keys(self) -> list[StoredKey]:
        return list(self._keys.values())

    def group_limits(self, group_id: str) -> GroupLimits:
        return self._groups.get(hashed_group(group_id), {})

    # -- changes (an admin's) --------------------------------------------------------------------------

    def create(
        self,
        *,
        name: str,
        groups: Sequence[str],
        role: str,
        expires_at: datetime | None = None,
        limits: Mapping[str, float] | None = None,
    ) -> tuple[StoredKey, str]:
        """A new key and its secret (shown once, never stored)."""
        with self._write:
            self.refresh()
            if any(key.name == name and key.revoked_at is None for key in self._keys.values()):
                raise ConflictError(f"a key named {name!r} exists: names sign changes in the audit trail")
            key_id = secrets.new_key_id()
            secret = secrets.new_secret(key_id)
            key = StoredKey(
                id=key_id,
                name=name,
                groups=tuple(groups),
                role=role,
                secret_hash=secrets.hash_secret(secret),
                created_at=self._now(),
                expires_at=expires_at,
                limits=dict(limits or {}),
            )
            self._put([key])
        return key, secret

    def revoke(self, key_id: str) -> StoredKey:
        with self._write:
            key = self._current(key_id)
            if key.revoked_at is not None:
                return key
            revoked = replace(key, revoked_at=self._now())
            self._put([revoked])
        return revoked

    def rotate(self, key_id: str) -> tuple[StoredKey, str]:
        """A new secret for the key (same id, name, groups, role and limits); the old one is refused."""
        with self._write:
            key = self._current(key_id)
            if key.revoked_at is not None:
                raise ConflictError(f"key {key_id} is revoked: make a new one")
            secret = secrets.new_secret(key_id)
            rotated = replace(key, secret_hash=secrets.hash_secret(secret), source="api")
            self._put([rotated])
        return rotated, secret

    def set_limits(self, key_id: str, limits: Mapping[str, float]) -> StoredKey:
        with self._write:
            changed = replace(self._current(key_id), limits=dict(limits))
            self._put([changed])
        return changed

    def set_group_limits(self, group_id: str, limits: Mapping[str, float]) -> GroupLimits:
        with self._write:
            self._records.put_group_limits(group_id, dict(limits))
            self.refresh()
        return dict(limits)

    def seed(self, seeds: Sequence[Seed]) -> list[str]:
        """Keep the keys file's keys in the store (hashed). A file key the store does not hold is added; one
        it holds as the file gave it (neither rotated nor revoked) takes the file's name, groups, role and
        expiry; a rotated or revoked one stays as it is. Returns the ids added or changed."""
        with self._write:
            self.refresh()
            written = []
            for seed in seeds:
                held = self._keys.get(seed.id)
                if held is None:
                    written.append(
                        StoredKey(
                            id=seed.id,
                            name=seed.name or seed.id,
                            groups=seed.groups,
                            role=seed.role,
                            secret_hash=secrets.hash_secret(seed.secret),
                            created_at=self._now(),
                            expires_at=seed.expires_at,
                            source="file",
                        )
                    )
                    continue
                fields = {"name": seed.name or seed.id, "groups": seed.groups, "role": seed.role}
                wanted = replace(held, expires_at=seed.expires_at, **fields)  # type: ignore[arg-type]
                if held.source == "file" and held.revoked_at is None and wanted != held:
                    if self._verified.check(seed.id, seed.secret, held.secret_hash):
                        written.append(wanted)
            if written:
                self._put(written)
        return [key.id for key in written]

    def _current(self, key_id: str) -> StoredKey:
        key = self._records.get(key_id)
        if key is None:
            raise NotFoundError(f"no key with id {key_id!r}")
        return key

    def _put(self, keys: list[StoredKey]) -> None:
        self._records.put(keys)
        # Read back rather than take the new stamp as known: another server may have written just before.
        self.refresh()
