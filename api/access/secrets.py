"""API key secrets: made, hashed, checked. Only a salted hash is ever stored.

A key made by epimem reads ``epm_<id>_<secret>``: its public id (12 hex digits, also the key's id as
``key-<hex>``) and 32 random bytes. A key from the keys file is any string of 16 characters or more; its id
is derived from it by a one-way hash (``key-`` + 12 hex digits of its SHA-256, the actor the audit trail
always showed for an unnamed file key). Either way a presented key names its record, so checking it is
one lookup and one comparison, never a scan of every key.

The hash is scrypt (the standard library's ``hashlib.scrypt``: memory-hard, no dependency), n=2**14, r=8,
p=1, a 16-byte salt, kept as ``scrypt$n$r$p$<salt hex>$<hash hex>`` so that the cost can change later.
One check costs ~0.05-0.1 s of CPU: ``Verified`` remembers a secret that passed (as an HMAC under a key
that lives only in this process), so each later request with it costs one HMAC.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections.abc import Callable

PREFIX = "epm_"
_MADE = re.compile(r"^epm_([0-9a-f]{12})_[A-Za-z0-9_-]{20,}$")
_N, _R, _P, _DKLEN = 2**14, 8, 1, 32


def key_id_of(presented: str) -> str:
    """The id a presented key claims (made keys carry it; file keys derive it)."""
    made = _MADE.match(presented)
    if made is not None:
        return f"key-{made.group(1)}"
    return "key-" + hashlib.sha256(presented.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def new_key_id() -> str:
    return f"key-{secrets.token_hex(6)}"


def new_secret(key_id: str) -> str:
    """A fresh secret for ``key_id`` (``key-<hex>``); shown once."""
    return f"{PREFIX}{key_id.removeprefix('key-')}_{secrets.token_urlsafe(32)}"


def hash_secret(secret: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(secret.encode("utf-8", "surrogatepass"), salt=salt, n=_N, r=_R, p=_P, dklen=_DKLEN)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def verify(secret: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, expected = stored.split("$")
        if scheme != "scrypt":
            return False
        digest = hashlib.scrypt(
            secret.encode("utf-8", "surrogatepass"),
            salt=bytes.fromhex(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected) // 2,
            maxmem=2**27,
        )
    except ValueError:
        return False
    return hmac.compare_digest(digest.hex(), expected)


FAILED_CHECKS_PER_S = 5  # scrypt checks of wrong secrets per key id and second; more are refused unchecked


class Verified:
    """Secrets that passed ``verify`` against a stored hash, remembered as an HMAC under a per-process key
    (the process never keeps a secret itself). A changed hash (a rotation) forgets the old secret.

    A wrong secret for a known id costs a scrypt check: at most ``FAILED_CHECKS_PER_S`` per id and second are
    made (more are refused without one), so guessing cannot turn the hash's cost against the server."""

    def __init__(self, size: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = os.urandom(32)
        self._size = size
        self._clock = clock
        self._passed: dict[tuple[str, str], bytes] = {}
        self._failed: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _mac(self, secret: str) -> bytes:
        return hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def known(self, key_id: str, secret: str, stored: str) -> bool | None:
        """Whether the secret is the one that passed before (None: none passed; only ``check`` can say)."""
        with self._lock:
            passed = self._passed.get((key_id, stored))
        return None if passed is None else hmac.compare_digest(passed, self._mac(secret))

    def check(self, key_id: str, secret: str, stored: str) -> bool:
        known = self.known(key_id, secret, stored)
        if known is not None:
            return known
        now = self._clock()
        with self._lock:
            recent = [t for t in self._failed.get(key_id, []) if now - t < 1.0]
            if len(recent) >= FAILED_CHECKS_PER_S:
                return False
        if not verify(secret, stored):
            with self._lock:
                if len(self._failed) >= self._size:
                    self._failed.clear()
                self._failed[key_id] = [*recent, now]
            return False
        with self._lock:
            if len(self._passed) >= self._size:
                self._passed.clear()
            self._passed[(key_id, stored)] = self._mac(secret)
        return True
