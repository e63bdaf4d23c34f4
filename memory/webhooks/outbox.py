"""The webhook outbox: the write path's event publisher (memory.events) that keeps every event for every
subscription covering its group, durably, in the shared store, until it is delivered
(memory.webhooks.delivery). Several epimem servers on one Chroma server write one outbox.

Publishing runs on the write path after the change: with no subscription for the group it costs a
look at the cached subscriptions; otherwise one store write. A write that fails is logged and counted
(``failures``), never turned into a failure of the change that already happened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from memory.errors import EpimemError
from memory.events import ChangeEvent
from memory.store.webhook_store import WebhookStore
from memory.webhooks.subscriptions import Subscriptions

log = logging.getLogger("epimem.webhooks")


class Outbox:
    def __init__(self, store: WebhookStore, subscriptions: Subscriptions) -> None:
        self._store = store
        self._subscriptions = subscriptions
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.failures = 0  # events that could not be kept

    def on_publish(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after events were kept (the delivery worker wakes up)."""
        self._listeners.append(listener)

    def wants(self, group_id: str) -> bool:
        try:
            return bool(self._subscriptions.covering(group_id))
        except EpimemError:  # the store is down: publish will say so
            return True

    def publish(self, events: Sequence[ChangeEvent]) -> None:
        try:
            rows = [
                (subscription.id, event.id, event.model_dump_json())
                for event in events
                for subscription in self._subscriptions.covering(event.group_id)
            ]
            if not rows:
                return
            self._store.add_events(rows)
        except EpimemError as error:  # the store is down: the change stands, its event is lost (logged)
            with self._lock:
                self.failures += len(events)
            log.error("change events not kept for webhooks (%d): %s", len(events), error.message)
            return
        for listener in self._listeners:
            listener()
