"""Request and response bodies of the key and limit routes (``api.http.keys``). Limits are strict numbers:
``"5"`` or ``true`` is refused, not read as 5 or 1."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from api.auth import KeyEntry
from memory.models import UtcDatetime, ValidUnicode
from memory.store.keys import StoredKey
from memory.timeutil import utc_now

MAX_PATTERNS = 100
Rate = Annotated[StrictFloat | StrictInt, Field(gt=0, le=1_000_000)]
Count = Annotated[StrictInt, Field(ge=1, le=10**15)]
KEY_ID_PATTERN = r"^key-[0-9a-f]{12}$"


class KeyLimitsIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"messages_per_day": 10000}]})

    requests_per_second: Rate | None = Field(default=None, description="per server")
    messages_per_day: Count | None = Field(default=None, description="messages added per UTC day, every server")

    def values(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.model_dump(exclude_none=True).items()}


class GroupLimitsIn(KeyLimitsIn):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"stored_chars": 50_000_000}]})

    stored_chars: Count | None = Field(default=None, description="characters the group's messages may hold")


class KeyIn(ValidUnicode):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"name": "support-bot", "groups": ["team-a"], "role": "write", "limits": {"requests_per_second": 20}}
            ]
        },
    )

    name: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="who the key is: the audit trail and revisions sign its changes with it; unique among live keys",
    )
    groups: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        min_length=1, max_length=MAX_PATTERNS, description="group ids, or prefixes ending in '*' ('*': every group)"
    )
    role: Literal["read", "write", "admin"]
    expires_at: UtcDatetime | None = Field(default=None, description="refused from this time on (ISO; naive = UTC)")
    limits: KeyLimitsIn | None = None

    @field_validator("groups")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return KeyEntry.check_patterns(value)

    @field_validator("expires_at")
    @classmethod
    def _future(cls, value: datetime | None) -> datetime | None:
        if value is not None and value <= utc_now():
            raise ValueError("expires_at is in the past: the key would never work")
        return value


class KeyOut(BaseModel):
    id: str = Field(description="public: names the key in listings, the audit trail of an unnamed file key, URLs")
    name: str
    groups: list[str]
    role: str
    status: Literal["active", "expired", "revoked"]
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    source: Literal["api", "file"] = Field(description="made over HTTP, or imported from the keys file")
    limits: dict[str, float] = Field(description="the key's own limits")
    effective_limits: dict[str, float] = Field(description="what applies: its own, else the server's defaults")
    usage: dict[str, int] = Field(default_factory=dict, description="messages_today: added today (UTC), every server")

    @classmethod
    def of(cls, key: StoredKey, effective: dict[str, float], usage: dict[str, int]) -> KeyOut:
        now = utc_now()
        status: Literal["active", "expired", "revoked"] = "active"
        if key.revoked_at is not None:
            status = "revoked"
        elif key.expires_at is not None and key.expires_at <= now:
            status = "expired"
        return cls(
            id=key.id,
            name=key.name,
            groups=list(key.groups),
            role=key.role,
            status=status,
            created_at=key.created_at,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
            source="file" if key.source == "file" else "api",
            limits=dict(key.limits),
            effective_limits=effective,
            usage=usage,
        )


class KeyCreated(KeyOut):
    key: str = Field(description="the secret: shown this once, stored only as a salted hash")


class KeysOut(BaseModel):
    keys: list[KeyOut] = Field(description="oldest first; revoked keys too")


class GroupUsageOut(BaseModel):
    group_id: str
    limits: dict[str, float] = Field(description="the group's own limits")
    effective_limits: dict[str, float] = Field(description="what applies: its own, else the server's defaults")
    usage: dict[str, int] = Field(description="messages_today (UTC, every server) and stored_chars")


class UsageRow(BaseModel):
    kind: Literal["key", "group"]
    id: str
    messages_today: int


class UsageOut(BaseModel):
    day: str = Field(description="the UTC day the counts are of")
    rows: list[UsageRow] = Field(description="every key and group that added messages today")
