"""Which server delivers a subscription's events: one at a time, by a lease per subscription in the shared
store, so that a session's events leave in order and each once (at least once: a holder that stalled
past its lease may deliver one event again after another server took over).

The lease is a chain of records ``lease-<subscription>-<epoch>`` (memory.store.webhook_store): a server
takes epoch + 1 when the highest epoch is expired, and holds the lease if its record is the highest one
when it reads back (``add`` of an existing id is ignored: the first writer of an epoch wins). The holder
renews its record every ``ttl / 3``; older epochs are removed by the holder.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from memory.store.webhook_store import WebhookStore


class DeliveryLeases:
    def __init__(self, store: WebhookStore, *, node_id: str, ttl_s: float, clock: Callable[[], float]) -> None:
        self._store = store
        self._owner = f"{node_id}:{uuid.uuid4().hex[:8]}"
        self._ttl = ttl_s
        self._clock = clock
        self._renewed: dict[str, float] = {}  # subscription -> when this server last renewed its lease

    def hold(self, subscription_id: str) -> bool:
        """Whether this server holds (or just took) the subscription's lease."""
        now = self._clock()
        records = self._store.leases(subscription_id)
        top = max(records, key=lambda r: int(r["epoch"]), default=None)
        if top is not None and top["owner"] == self._owner and float(top["expires"]) > now:
            if now - self._renewed.get(subscription_id, 0.0) >= self._ttl / 3:
                self._write(subscription_id, int(top["epoch"]), now)
            return True
        if top is not None and float(top["expires"]) > now:
            return False
        epoch = int(top["epoch"]) + 1 if top is not None else 0
        self._write(subscription_id, epoch, now, insert=True)
        after = self._store.leases(subscription_id)
        winner = max(after, key=lambda r: int(r["epoch"]))
        if int(winner["epoch"]) != epoch or winner["owner"] != self._owner:
            return False
        stale = [int(r["epoch"]) for r in after if int(r["epoch"]) < epoch]
        if stale:
            self._store.delete_leases(subscription_id, stale)
        return True

    def _write(self, subscription_id: str, epoch: int, now: float, *, insert: bool = False) -> None:
        metadata = {"owner": self._owner, "expires": now + self._ttl}
        self._store.put_lease(subscription_id, epoch, metadata, insert=insert)
        self._renewed[subscription_id] = now
