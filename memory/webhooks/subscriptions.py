"""Webhook subscriptions: where a group's change events go, signed with whose secret, and which URLs are
allowed at all.

A subscription covers groups by pattern, as API keys do (an exact id, a prefix ending in ``*``, ``*``
for every group). Its secret signs the deliveries (memory.webhooks.delivery); it is stored in the
shared store because signing needs it, is never returned after creation and never logged.

URLs (``HostPolicy``): ``http`` or ``https`` only, no credentials in the URL. A host that is, or
resolves to, a loopback, private, link-local, shared, reserved or multicast address (a cloud metadata
endpoint, another service on the server's network) is refused unless the operator named it in
``EPIMEM_WEBHOOK_ALLOW_HOSTS``; the check runs when the subscription is made and again before every
delivery, so a name that later resolves somewhere private is refused then.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from memory.errors import InvalidInputError, NotFoundError
from memory.models import UtcDatetime, ValidUnicode
from memory.store.webhook_store import WebhookStore
from memory.timeutil import utc_now

log = logging.getLogger("epimem.webhooks")

Resolver = Callable[[str], list[str]]
REFRESH_S = 2.0  # how stale another server's view of the subscriptions may be


def covers(patterns: Iterable[str], group_id: str) -> bool:
    return any(group_id.startswith(p[:-1]) if p.endswith("*") else group_id == p for p in patterns)


class Subscription(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    url: str
    groups: list[str]
    secret: SecretStr
    created_at: UtcDatetime
    created_by: str
    description: str | None = None

    def public(self) -> dict[str, object]:
        """What the API shows: everything but the secret."""
        return self.model_dump(mode="json", exclude={"secret"})

    def stored(self) -> str:
        """What the store keeps: everything, the secret too (signing needs it)."""
        return json.dumps({**self.public(), "secret": self.secret.get_secret_value()}, ensure_ascii=False)


class SubscriptionIn(ValidUnicode):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000)
    secret: str = Field(min_length=16, max_length=500, description="signs every delivery; at least 16 characters")
    groups: list[str] = Field(min_length=1, max_length=100)
    description: str | None = Field(default=None, max_length=500)

    @field_validator("groups")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or "*" in pattern[:-1] or len(pattern) > 500:
                raise ValueError("a group pattern is an id, or a prefix followed by '*' ('*' alone: every group)")
        return value


def _resolve(host: str) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


class HostPolicy:
    """Which webhook URLs may be called (see the module notes)."""

    def __init__(self, allow_hosts: Iterable[str] = (), *, resolve: Resolver = _resolve) -> None:
        self.allowed = frozenset(h.strip().lower().strip("[]") for h in allow_hosts if h.strip())
        self._resolve = resolve

    def check(self, url: str) -> str:
        """The URL, or InvalidInputError saying why it may not be called."""
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
            _ = parts.port
        except ValueError:
            raise InvalidInputError("the webhook URL is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not host:
            raise InvalidInputError("a webhook URL is http:// or https:// with a host")
        if parts.username or parts.password:
            raise InvalidInputError("a webhook URL must not carry credentials (the secret signs the deliveries)")
        if host in self.allowed:
            return url
        try:
            addresses = [host] if _is_address(host) else self._resolve(host)
        except OSError:
            raise InvalidInputError(f"the webhook host {host!r} does not resolve") from None
        internal = [a for a in addresses if _internal(a)]
        if internal or not addresses:
            raise InvalidInputError(
                f"the webhook host {host!r} is a loopback or private address: name it in "
                "EPIMEM_WEBHOOK_ALLOW_HOSTS to allow it",
                details={"host": host},
            )
        return url


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Subscriptions:
    """The subscriptions, cached for the write path (refreshed from the store every ``REFRESH_S``, at
    once after a change made here)."""

    def __init__(self, store: WebhookStore, policy: HostPolicy, *, refresh_s: float = REFRESH_S) -> None:
        self._store = store
        self.policy = policy
        self._refresh_s = refresh_s
        self._cached: list[Subscription] | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def create(self, request: SubscriptionIn, *, actor: str) -> Subscription:
        self.policy.check(request.url)
        subscription = Subscription(
            id=secrets.token_hex(8),
            url=request.url,
            groups=request.groups,
            secret=SecretStr(request.secret),
            created_at=utc_now(),
            created_by=actor,
            description=request.description,
        )
        self._store.put_subscription(subscription.id, subscription.stored())
        self._forget()
        log.info("webhook subscription %s created for %d group patterns", subscription.id, len(request.groups))
        return subscription

    def delete(self, subscription_id: str) -> None:
        if not self._store.delete_subscription(subscription_id):
            raise NotFoundError("no such webhook subscription")
        self._forget()

    def get(self, subscription_id: str) -> Subscription:
        for subscription in self.all(fresh=True):
            if subscription.id == subscription_id:
                return subscription
        raise NotFoundError("no such webhook subscription")

    def all(self, *, fresh: bool = False) -> list[Subscription]:
        with self._lock:
            if fresh or self._cached is None or time.monotonic() - self._read_at > self._refresh_s:
                rows = self._store.subscriptions()
                self._cached = sorted(
                    (Subscription.model_validate_json(document) for _, document in rows), key=lambda s: s.created_at
                )
                self._read_at = time.monotonic()
            return list(self._cached)

    def covering(self, group_id: str) -> list[Subscription]:
        return [s for s in self.all() if covers(s.groups, group_id)]

    def _forget(self) -> None:
        with self._lock:
            self._cached = None
