"""API keys scoped to groups.

Key file (``EPIMEM_API_KEYS_FILE``)::

    {"keys": [{"key": "…", "groups": ["team-a", "proj-*"], "role": "read" | "write" | "admin",
               "expires": "2027-01-01T00:00:00Z", "name": "support-bot"}]}

A group pattern is an exact group id, or a prefix followed by ``*`` (``*`` alone = every group).
Roles are ordered: admin can do what write can, write what read can. ``expires`` (optional, ISO
time; naive = UTC): from then on the key is refused with 401. ``name`` (optional) is how the
changes made with the key are signed in revisions and the audit trail (``ApiKey.actor``).
Unknown fields and a secret listed twice make the file invalid (the service does not start), and so
does a file with no usable key (an empty list, or every key expired): it never means local mode.
Server-wide routes (``/metrics``) need an admin key for ``*``. With no key file the service runs in
local mode: no keys checked, and api.http.middleware serves only loopback clients, loopback
``Host`` names and loopback (or no) ``Origin``.

Authorization is checked before anything touches the store, from the raw path, so a 403 looks the
same whether or not the group exists. Keys are compared with ``hmac.compare_digest`` and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request

from api.errors import ForbiddenError, UnauthorizedError
from memory.errors import InvalidInputError
from memory.models import UtcDatetime
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
        for pattern in value:
            if not pattern or "*" in pattern[:-1]:
                raise ValueError(f"group pattern {pattern!r}: '*' is allowed only at the end")
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
    secret: bytes
    groups: tuple[str, ...]
    role: Role
    expires: datetime | None = None
    name: str | None = None

    @property
    def actor(self) -> str:
        """How changes made with this key are signed (revisions, the audit trail): its name, else an id
        derived from the secret by a one-way hash (never the secret)."""
        return self.name or f"key-{hashlib.sha256(self.secret).hexdigest()[:12]}"

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
    def __init__(self, keys: list[ApiKey]) -> None:
        self._keys = keys

    @classmethod
    def from_file(cls, path: Path | None) -> KeyRing:
        if path is None:
            return cls([])
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
        return cls(
            [ApiKey(e.key.encode(), tuple(e.groups), Role[e.role.upper()], e.expires, e.name) for e in parsed.keys]
        )

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def find(self, presented: str) -> ApiKey | None:
        candidate = presented.encode()
        found = None
        for key in self._keys:  # no early exit: the time taken says nothing about which key matched
            if hmac.compare_digest(key.secret, candidate):
                found = key
        return found

    def authenticate(self, headers: Mapping[str, str]) -> ApiKey:
        """The caller's key from ``Authorization: Bearer``; 401 when missing, unknown or expired."""
        header = headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
        key = self.find(token.strip())
        if key is None:
            raise UnauthorizedError("unknown API key")
        if key.expires is not None and utc_now() >= key.expires:
            raise UnauthorizedError("this API key has expired")
        return key

    def authorize(self, request: Request, role: Role, *, server_wide: bool = False) -> Principal:
        """Raise 401/403 or return the principal. Reads ``group_id`` from the raw path parameters;
        ``server_wide`` routes (about every group) need a key for ``*``."""
        if not self.enabled:
            return Principal(None)
        key = self.authenticate(request.headers)
        group_id = request.path_params.get("group_id")
        if group_id is not None and not key.covers(str(group_id)):
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
