"""API keys scoped to groups.

The keys live in the deployment's key store (``memory.store.keys``, shared by every server on one Chroma
server; managed over ``/v1/keys`` and ``epimem keys``, held live by ``api.access.live_keys``). The keys
file (``EPIMEM_API_KEYS_FILE``) seeds it at every start::

    {"keys": [{"key": "…", "groups": ["team-a", "proj-*"], "role": "read" | "write" | "admin",
               "expires": "2027-01-01T00:00:00Z", "name": "support-bot"}]}

A group pattern is an exact group id, or a prefix followed by ``*`` (``*`` alone = every group).
Roles are ordered: admin can do what write can, write what read can. ``expires`` (optional, ISO
time; naive = UTC): from then on the key is refused with 401. ``name`` (optional) is how the
changes made with the key are signed in revisions and the audit trail (``ApiKey.actor``).
Unknown fields and a secret listed twice make the file invalid (the service does not start), and so
does a file with no usable key (an empty list, or every key expired): it never means local mode.
Server-wide routes (``/metrics``, ``/v1/keys``) need an admin key for ``*``. With no key file and
``EPIMEM_API_KEYS_STORE`` off the service runs in local mode: no keys checked, and api.http.middleware
serves only loopback clients, loopback ``Host`` names and loopback (or no) ``Origin``.

Authorization is checked before anything touches the store, from the raw path, so a 403 looks the
same whether or not the group exists. Secrets are checked against salted hashes (``api.access.secrets``)
and never logged.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request

from api.access.live_keys import LiveKeys, Seed
from api.access.quotas import Quotas
from api.errors import ForbiddenError, UnauthorizedError
from memory.errors import InvalidInputError
from memory.models import UtcDatetime
from memory.store.keys import StoredKey
from memory.timeutil import utc_now


class Role(IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3


class KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=16, description="the secret; at least 16 characters")
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="who the key is, as the audit trail and revisions name it (default: an id derived from the key)",
    )
    groups: list[str] = Field(min_length=1)
    role: str
    expires: UtcDatetime | None = Field(default=None, description="refused from this time on (ISO; naive = UTC)")

    @field_validator("role")
    @classmethod
    def _known_role(cls, value: str) -> str:
        if value not in ("read", "write", "admin"):
            raise ValueError("role must be read, write or admin")
        return value

    @field_validator("groups")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return cls.check_patterns(value)

    @staticmethod
    def check_patterns(value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or "*" in pattern[:-1]:
                raise ValueError(f"group pattern {pattern[:100]!r}: '*' is allowed only at the end")
        return value


class KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[KeyEntry]

    @field_validator("keys")
    @classmethod
    def _distinct(cls, value: list[KeyEntry]) -> list[KeyEntry]:
        first: dict[str, int] = {}
        for index, entry in enumerate(value):
            if entry.key in first:  # never quote the secret
                raise ValueError(f"entries {first[entry.key]} and {index} hold the same key")
            first[entry.key] = index
        return value


@dataclass(frozen=True)
class ApiKey:
    id: str
    groups: tuple[str, ...]
    role: Role
    expires: datetime | None = None
    name: str | None = None
    revoked: datetime | None = None
    limits: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, stored: StoredKey) -> ApiKey:
        return cls(
            stored.id,
            stored.groups,
            Role[stored.role.upper()],
            stored.expires_at,
            stored.name,
            stored.revoked_at,
            stored.limits,
        )

    @property
    def actor(self) -> str:
        """How changes made with this key are signed (revisions, the audit trail): its name, else its id
        (for a file key, derived from the secret by a one-way hash: never the secret)."""
        return self.name or self.id

    @property
    def every_group(self) -> bool:
        return "*" in self.groups

    def covers(self, group_id: str) -> bool:
        return any(
            group_id.startswith(pattern[:-1]) if pattern.endswith("*") else group_id == pattern
            for pattern in self.groups
        )


@dataclass(frozen=True)
class Principal:
    """Who is calling; ``None`` key = local mode."""

    key: ApiKey | None

    @property
    def actor(self) -> str:
        return self.key.actor if self.key is not None else LOCAL_ACTOR


LOCAL_ACTOR = "local"  # who changes memory in local mode (no keys)


class KeyRing:
    """The keys a server accepts. Until a store is attached (``attach``, once the service is built), the
    keys file's keys, compared in memory; from then on the deployment's key store, which the file's keys
    seed (``api.access.live_keys``). Keys are required when a keys file is given or ``store`` is set."""

    def __init__(self, seeds: list[Seed], *, store: bool = False, now: Callable[[], datetime] = utc_now) -> None:
        self._seeds = seeds
        self._required = bool(seeds) or store
        self.clock = now  # what "now" is for expiry (tests move it)
        self.live: LiveKeys | None = None
        self.quotas: Quotas | None = None

    @classmethod
    def from_file(cls, path: Path | None, *, store: bool = False) -> KeyRing:
        if path is None:
            return cls([], store=store)
        try:
            parsed = KeyFile.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, ValidationError) as error:
            # Never echo the file: it holds secrets. pydantic's message may quote input, so only locations.
            where = _error_places(error) if isinstance(error, ValidationError) else []
            raise InvalidInputError(f"cannot read the API key file {path}: {type(error).__name__} {where}") from None
        now = utc_now()
        if not any(entry.expires is None or entry.expires > now for entry in parsed.keys):
            # An empty list must not mean local mode: the operator asked for keys.
            why = "every key in it has expired" if parsed.keys else "its list of keys is empty"
            raise InvalidInputError(
                f"the API key file {path} holds no usable key ({why}): add a key, "
                "or unset EPIMEM_API_KEYS_FILE to run in local mode (this machine only)"
            )
        seeds = [Seed(e.key, e.name, tuple(e.groups), e.role, e.expires) for e in parsed.keys]
        return cls(seeds, store=store)

    def attach(self, live: LiveKeys, quotas: Quotas | None = None) -> list[str]:
        """Serve the keys of the store from now on, after seeding it with the file's; returns the ids the
        file added or changed."""
        written = live.seed(self._seeds) if self._seeds else []
        self.live, self.quotas = live, quotas
        self._seeds = []  # the store holds them now (hashed): no secret stays in this process
        return written

    @property
    def enabled(self) -> bool:
        return self._required

    def find(self, presented: str) -> ApiKey | None:
        if self.live is not None:
            stored = self.live.lookup(presented)
            return ApiKey.of(stored) if stored is not None else None
        candidate = presented.encode()
        found = None
        for seed in self._seeds:  # no early exit: the time taken says nothing about which key matched
            if hmac.compare_digest(seed.secret.encode(), candidate):
                found = ApiKey(seed.id, seed.groups, Role[seed.role.upper()], seed.expires_at, seed.name)
        return found

    def authenticate(self, headers: Mapping[str, str]) -> ApiKey:
        """The caller's key from ``Authorization: Bearer``; 401 when missing, unknown, revoked or expired."""
        header = headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
        key = self.find(token.strip())
        if key is None:
            raise UnauthorizedError("unknown API key")
        if key.revoked is not None:
            raise UnauthorizedError("this API key was revoked")
        if key.expires is not None and self.clock() >= key.expires:
            raise UnauthorizedError("this API key has expired")
        return key

    def authorize(self, request: Request, role: Role, *, server_wide: bool = False) -> Principal:
        """Raise 401/403 (or 429 over a rate limit) or return the principal. Reads ``group_id`` from the raw
        path parameters; ``server_wide`` routes (about every group) need a key for ``*``."""
        group_id = request.path_params.get("group_id")
        principal = self.check(request.headers, None if group_id is None else str(group_id), role, server_wide)
        if self.quotas is not None:
            key = principal.key
            self.quotas.admit_request(
                key.id if key else None, key.limits if key else {}, None if group_id is None else str(group_id)
            )
        return principal

    def check(self, headers: Mapping[str, str], group_id: str | None, role: Role, server_wide: bool) -> Principal:
        if not self.enabled:
            return Principal(None)
        key = self.authenticate(headers)
        if group_id is not None and not key.covers(group_id):
            raise ForbiddenError("this key may not access this group")
        if server_wide and not key.every_group:
            raise ForbiddenError("this shows every group's figures: it needs a key for every group ('*')")
        if key.role < role:
            raise ForbiddenError(
                f"this key's role ({key.role.name.lower()}) may not do this; needs {role.name.lower()}"
            )
        return Principal(key)


def _error_places(error: ValidationError) -> list[str]:
    """Where a key file is wrong, and pydantic's message when it quotes no input (never a secret)."""
    places = []
    for item in error.errors():
        where = ".".join(map(str, item["loc"]))
        reason = str(item.get("msg", "")) if item.get("type") in ("extra_forbidden", "value_error") else ""
        places.append(f"{where}: {reason}" if reason else where)
    return places
