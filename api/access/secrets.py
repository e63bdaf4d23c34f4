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


class Verified:
    """Secrets that passed ``verify`` against a stored hash, remembered as an HMAC under a per-process key
    (the process never keeps a secret itself). A changed hash (a rotation) forgets the old secret."""

    def __init__(self, size: int = 10_000) -> None:
        self._key = os.urandom(32)
        self._size = size
        self._passed: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def _mac(self, secret: str) -> bytes:
        return hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def check(self, key_id: str, secret: str, stored: str) -> bool:
        mac = self._mac(secret)
        with self._lock:
            known = self._passed.get((key_id, stored))
        if known is not None:
            return hmac.compare_digest(known, mac)
        if not verify(secret, stored):
            return False
        with self._lock:
            if len(self._passed) >= self._size:
                self._passed.clear()
            self._passed[(key_id, stored)] = mac
        return True
