"""The webhooks as the surfaces see them: subscriptions made, listed and removed, their delivery logs, and
the outbox the write path publishes to, with the background delivery worker when this server delivers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

from memory.store.webhook_store import WebhookStore
from memory.webhooks.delivery import Attempt, Delivery, DeliveryWorker, default_backoff
from memory.webhooks.outbox import Outbox
from memory.webhooks.subscriptions import HostPolicy, Subscription, SubscriptionIn, Subscriptions


class DeliveryLog(BaseModel):
    subscription: dict[str, object] = Field(description="the subscription (without its secret)")
    pending: int = Field(description="events waiting for delivery")
    attempts: list[Attempt] = Field(description="the last attempts, newest first")


class Webhooks:
    def __init__(
        self,
        store: WebhookStore,
        *,
        allow_hosts: Iterable[str],
        node_id: str,
        poll_s: float,
        timeout_s: float,
        max_age_s: float,
        lease_ttl_s: float,
        clock: Callable[[], float] = time.time,
        backoff: Callable[[int], float] = default_backoff,
    ) -> None:
        self._store = store
        self.subscriptions = Subscriptions(store, HostPolicy(allow_hosts))
        self.outbox = Outbox(store, self.subscriptions)
        self.delivery = Delivery(
            store=store,
            subscriptions=self.subscriptions,
            node_id=node_id,
            timeout_s=timeout_s,
            max_age_s=max_age_s,
            lease_ttl_s=lease_ttl_s,
            clock=clock,
            backoff=backoff,
        )
        self._worker = DeliveryWorker(self.delivery, poll_s=poll_s) if poll_s > 0 else None
        if self._worker is not None:
            self.outbox.on_publish(self._worker.nudge)

    def create(self, request: SubscriptionIn, *, actor: str) -> Subscription:
        subscription = self.subscriptions.create(request, actor=actor)
        if self._worker is not None:
            self._worker.nudge()
        return subscription

    def list(self) -> list[Subscription]:
        return self.subscriptions.all(fresh=True)

    def delete(self, subscription_id: str) -> None:
        self.subscriptions.delete(subscription_id)

    def deliveries(self, subscription_id: str, *, limit: int = 50) -> DeliveryLog:
        subscription = self.subscriptions.get(subscription_id)
        return DeliveryLog(
            subscription=subscription.public(),
            pending=self._store.pending_count(subscription_id),
            attempts=self.delivery.attempts(subscription_id, limit),
        )

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        else:
            self.delivery.close()
