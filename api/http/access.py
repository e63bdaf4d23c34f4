"""The app's keys and limits put together over its service: the live key store (seeded by the keys file),
the shared usage counters, the limits, and the background recheck that keeps them current; an add within the
limits (``add_within_limits``) and an import too (``import_within_limits``); the figures of the limits for
``/metrics`` (``AccessCollector``)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api.access.counters import SharedCounters
from api.access.live_keys import LiveKeys
from api.access.quotas import Quotas
from api.access.rates import RateLimiter
from api.auth import KeyRing, Principal
from api.facade import Epimem
from api.settings import Settings
from memory.errors import EpimemError
from memory.lifecycle.export_format import read_export
from memory.models import Message
from memory.receipts import AddReceipt, ImportReceipt

log = logging.getLogger("epimem.access")


def attach_access(app: FastAPI, service: Epimem) -> None:
    """Build the keys and limits of ``app`` over ``service`` (once it exists) and seed the key store."""
    settings: Settings = app.state.settings
    keys: KeyRing = app.state.keys
    store = service.memory.store
    counters = SharedCounters(store.usage, refresh_s=settings.usage_refresh_s)
    live: LiveKeys | None = None

    def group_limits(group_id: str) -> dict[str, float]:
        return live.group_limits(group_id) if live is not None else {}

    quotas = Quotas(
        counters=counters,
        rates=RateLimiter(),
        group_limits=group_limits,
        measure_chars=store.usage.stored_chars,
        key_defaults=_defaults(
            requests_per_second=settings.key_requests_per_second, messages_per_day=settings.key_messages_per_day
        ),
        group_defaults=_defaults(
            requests_per_second=settings.group_requests_per_second,
            messages_per_day=settings.group_messages_per_day,
            stored_chars=settings.group_stored_chars,
        ),
    )
    live = LiveKeys(store.keys, recheck_s=settings.keys_recheck_s, on_refresh=[counters.flush, quotas.recount_due])
    live.refresh()
    seeded = keys.attach(live, quotas)
    if seeded:
        log.info("the keys file added or changed %d keys in the key store (kept hashed)", len(seeded))
    service.memory.subscribe("usage-counters", quotas.changed)
    app.state.quotas = quotas


def start_access(app: FastAPI) -> None:
    keys: KeyRing = app.state.keys
    if keys.live is not None:
        keys.live.start()


def stop_access(app: FastAPI) -> None:
    """Stop the recheck and write what this server counted."""
    keys: KeyRing = app.state.keys
    quotas: Quotas | None = getattr(app.state, "quotas", None)
    if keys.live is not None:
        keys.live.close()
    if quotas is not None:
        try:
            quotas.counters.flush()
        except EpimemError as error:
            log.warning("usage counted since the last write is lost: %s", error.message)


def add_within_limits(
    request: Request, who: Principal, group_id: str, session_id: str, messages: list[Message]
) -> AddReceipt:
    """An add of ``POST .../messages`` within the limits of the caller's key and the group (429 if not)."""
    service: Epimem = request.app.state.service

    def add() -> AddReceipt:
        return service.add_messages(group_id, session_id, messages, actor=who.actor)

    def stored(ids: list[str]) -> set[str]:
        return set(service.memory.store.log.get_messages(group_id, session_id, ids))

    quotas: Quotas = request.app.state.quotas
    key = who.key
    return quotas.counted(key.id if key else None, key.limits if key else {}, group_id, messages, add, stored)


@dataclass
class _Imported:
    """A message of an import as the limits count it (its id made unique across the file's sessions)."""

    id: str
    content: str


def import_within_limits(
    request: Request, who: Principal, group_id: str, lines: list[str], *, restore: bool
) -> ImportReceipt:
    """An import of ``POST .../import`` within the limits: the messages it adds (those the group lacks) count
    against ``messages_per_day`` and ``stored_chars`` as an add's do (429 if they would pass a limit)."""
    service: Epimem = request.app.state.service
    contents = read_export(lines)
    said: dict[str, list[str]] = defaultdict(list)
    for stored in contents.messages:
        said[stored.session_id].append(stored.message.id)
    held = service.memory.store.log.get_messages_of_sessions(group_id, said) if said else {}
    absent = [
        _Imported(f"{s.session_id}\n{s.message.id}", s.message.content)
        for s in contents.messages
        if s.message.id not in held.get(s.session_id, {})
    ]
    quotas: Quotas = request.app.state.quotas
    key = who.key
    reservation = quotas.reserve(key.id if key else None, key.limits if key else {}, group_id, absent)
    try:
        receipt = service.import_group(contents, group_id=group_id, actor=who.actor, restore=restore)
    except BaseException:
        reservation.cancel()
        raise
    reservation.settle([m.id for m in absent])  # the import added every message the group lacked
    return receipt


def _defaults(**limits: float | None) -> dict[str, float]:
    return {name: float(value) for name, value in limits.items() if value is not None}


class AccessCollector(Collector):
    """429s sent, and each key's limits and messages today (keys are few and made by an admin; group ids
    never become labels, as everywhere in ``/metrics``: a group's use is at ``/v1/groups/{id}/usage``)."""

    def __init__(self, app: Any) -> None:
        self._app = app

    def collect(self) -> Iterator[Metric]:
        quotas: Quotas | None = getattr(self._app.state, "quotas", None)
        keys: KeyRing = self._app.state.keys
        if quotas is None or keys.live is None:
            return
        refusals = CounterMetricFamily(
            "epimem_limit_refusals", "Requests refused with 429, by limit and scope.", labels=["limit", "scope"]
        )
        for (limit, scope), count in sorted(quotas.refusal_counts().items()):
            refusals.add_metric([limit, scope], count)
        yield refusals
        stored = keys.live.keys()
        yield GaugeMetricFamily("epimem_keys", "API keys in the key store, revoked ones included.", value=len(stored))
        limits = GaugeMetricFamily("epimem_key_limit", "A key's limit (defaults included).", labels=["key", "limit"])
        used = GaugeMetricFamily(
            "epimem_key_messages_today", "Messages a key added today (UTC), every server.", labels=["key"]
        )
        try:
            today = quotas.usage_today()
        except EpimemError as error:
            log.warning("usage not read for /metrics: %s", error.message)
            today = {}
        for key in stored:
            if key.revoked_at is not None:
                continue
            for name, value in sorted(quotas.key_limits(key.limits).items()):
                limits.add_metric([key.id, name], value)
            used.add_metric([key.id], today.get(("key", key.id), 0))
        yield limits
        yield used
