"""Delivering the outbox: each event to each subscription's URL, signed, in order, at least once.

For each subscription whose lease this server holds (memory.webhooks.leases), the oldest waiting event
is POSTed as JSON with the headers ``X-Epimem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
"<t>.<body>" with the subscription's secret>``, ``X-Epimem-Event`` (its type) and ``X-Epimem-Delivery``
(its id). A 2xx answer removes it from the outbox; anything else (another status, a refused or timed-out
connection, a URL that now resolves to a refused address) is a failure: the subscription waits
``backoff(failures)`` and tries the same event again, and nothing after it leaves first, so every
session's events arrive in the order they were published. An event still undelivered ``max_age_s``
after it happened is dropped (and the attempt log says so). Every attempt is logged in the store (the
newest ``KEEP_ATTEMPTS`` per subscription), never with the secret or the event's URL credentials.

Time comes from ``clock`` (Unix seconds) and waits from ``backoff``, both injectable: tests drive
``run_once`` with their own clock and never sleep.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from pydantic import BaseModel

from memory.background import background_thread
from memory.errors import EpimemError
from memory.events import ChangeEvent
from memory.store.webhook_store import WebhookStore
from memory.timeutil import from_epoch, to_epoch
from memory.webhooks.leases import DeliveryLeases
from memory.webhooks.subscriptions import Subscription, Subscriptions

log = logging.getLogger("epimem.webhooks")

SIGNATURE_HEADER = "X-Epimem-Signature"
KEEP_ATTEMPTS = 100
BATCH = 50  # events sent to one subscription per pass, while they succeed
Clock = Callable[[], float]


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The ``X-Epimem-Signature`` value of a body sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def default_backoff(failures: int) -> float:
    """Seconds before the next try: 1, 2, 4, … up to five minutes."""
    return float(min(300, 2 ** max(0, failures - 1)))


class Attempt(BaseModel):
    at: str
    event_id: str
    event_type: str
    session_id: str | None
    outcome: str  # delivered | failed | expired
    status_code: int | None = None
    error: str | None = None
    failures: int = 0  # failed tries of this event so far
    duration_ms: float = 0.0


@dataclass
class _Backlog:
    failures: int = 0
    next_at: float = 0.0


class Delivery:
    def __init__(
        self,
        *,
        store: WebhookStore,
        subscriptions: Subscriptions,
        node_id: str,
        timeout_s: float = 10.0,
        max_age_s: float = 72 * 3600.0,
        lease_ttl_s: float = 30.0,
        clock: Clock = time.time,
        backoff: Callable[[int], float] = default_backoff,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._store = store
        self._subscriptions = subscriptions
        self._clock = clock
        self._backoff = backoff
        self._max_age = max_age_s
        self._leases = DeliveryLeases(store, node_id=node_id, ttl_s=lease_ttl_s, clock=clock)
        self._timeout_s, self._transport = timeout_s, transport
        # Made at the first delivery: a client loads the CA bundle (~17 ms of CPU), and most services never
        # deliver an event.
        self._http: httpx.Client | None = None
        self._backlogs: dict[str, _Backlog] = {}
        self._lock = threading.Lock()  # one pass at a time (the worker's, or a test's)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def _client(self) -> httpx.Client:
        if self._http is None:
            # No redirects (a redirect could lead anywhere the host policy refuses), no proxies from the
            # environment.
            self._http = httpx.Client(
                timeout=self._timeout_s, follow_redirects=False, trust_env=False, transport=self._transport
            )
        return self._http

    def run_once(self) -> int:
        """One pass over every subscription: what is due is sent. Returns how many events were delivered."""
        delivered = 0
        with self._lock:
            for subscription in self._subscriptions.all():
                try:
                    delivered += self._serve(subscription)
                except EpimemError as error:  # the store is down: tried again on the next pass
                    log.warning("webhook delivery pass for %s stopped: %s", subscription.id, error.message)
        return delivered

    def _serve(self, subscription: Subscription) -> int:
        backlog = self._backlogs.setdefault(subscription.id, _Backlog())
        if self._clock() < backlog.next_at or not self._leases.hold(subscription.id):
            return 0
        delivered = 0
        for event_id, document in self._store.pending(subscription.id, BATCH):
            event = ChangeEvent.model_validate_json(document)
            if self._clock() - to_epoch(event.time) > self._max_age:
                self._log(subscription, event, "expired", failures=backlog.failures)
                self._store.remove_event(subscription.id, event_id)
                backlog.failures = 0
                continue
            outcome = self._post(subscription, event, document.encode())
            if outcome.outcome != "delivered":
                backlog.failures += 1
                backlog.next_at = self._clock() + self._backoff(backlog.failures)
                self._attempt(subscription, outcome.model_copy(update={"failures": backlog.failures}))
                return delivered
            # Logged before it leaves the queue: once nothing is pending, the log holds every attempt.
            self._attempt(subscription, outcome.model_copy(update={"failures": backlog.failures}))
            self._store.remove_event(subscription.id, event_id)
            backlog.failures = 0
            delivered += 1
        return delivered

    def _post(self, subscription: Subscription, event: ChangeEvent, body: bytes) -> Attempt:
        now = self._clock()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(subscription.secret.get_secret_value(), body, int(now)),
            "X-Epimem-Event": event.type.value,
            "X-Epimem-Delivery": event.id,
        }
        started = time.perf_counter()
        status: int | None = None
        error: str | None = None
        try:
            self._subscriptions.policy.check(subscription.url)
            status = self._client().post(subscription.url, content=body, headers=headers).status_code
        except EpimemError as refused:
            error = refused.message
        except httpx.HTTPError as failed:
            error = type(failed).__name__  # never the URL (it may name a private path)
        ok = status is not None and 200 <= status < 300
        if not ok and error is None:
            error = f"HTTP {status}"
        return Attempt(
            at=from_epoch(now).isoformat(),
            event_id=event.id,
            event_type=event.type.value,
            session_id=event.session_id,
            outcome="delivered" if ok else "failed",
            status_code=status,
            error=error,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    def _log(self, subscription: Subscription, event: ChangeEvent, outcome: str, *, failures: int) -> None:
        at = from_epoch(self._clock()).isoformat()
        attempt = Attempt(
            at=at, event_id=event.id, event_type=event.type.value, session_id=event.session_id, outcome=outcome
        )
        self._attempt(subscription, attempt.model_copy(update={"failures": failures}))

    def _attempt(self, subscription: Subscription, attempt: Attempt) -> None:
        attempt_id = f"{int(self._clock() * 1e6):020d}-{attempt.event_id[-8:]}-{attempt.failures:04d}"
        self._store.put_attempt(subscription.id, attempt_id, attempt.model_dump_json(), keep=KEEP_ATTEMPTS)
        if attempt.outcome != "delivered":
            log.warning(
                "webhook %s: event %s %s (%s)", subscription.id, attempt.event_id, attempt.outcome, attempt.error or ""
            )

    def attempts(self, subscription_id: str, limit: int = 50) -> list[Attempt]:
        return [Attempt.model_validate_json(document) for _, document in self._store.attempts(subscription_id, limit)]


class DeliveryWorker:
    """Runs ``Delivery.run_once`` every ``poll_s`` seconds, and at once when the outbox was written."""

    def __init__(self, delivery: Delivery, *, poll_s: float) -> None:
        self._delivery = delivery
        self._poll = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = background_thread(self._run, name="epimem-webhooks")
        self._thread.start()

    def nudge(self) -> None:
        self._wake.set()

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=timeout)
        self._delivery.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._delivery.run_once() >= BATCH:
                    continue  # more may be waiting: no pause
            except Exception:  # noqa: BLE001 - the worker must survive; logged with its trace
                log.exception("webhook delivery pass crashed; it runs again on the next poll")
            self._wake.wait(self._poll)
            self._wake.clear()
