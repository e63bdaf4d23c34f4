"""Change events to webhooks, against a real HTTP receiver (tests/helpers/webhook_receiver.py) that checks every
signature with its own HMAC: every kind of change arrives, signed, in order per session, with ids and never
content; a receiver down for an hour loses nothing (the delivery's clock and backoff are the test's: nothing
waits on the wall clock); the outbox survives a restart; two servers on one Chroma server deliver each
event once; loopback and private hosts need the allow-list; the secret is never shown or logged."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from helpers.builders import REFERENCE, T0, chat
from helpers.webhook_receiver import WebhookReceiver

from api.facade import Epimem
from memory.errors import InvalidInputError
from memory.events import MAX_IDS, ChangeEvent, ChangeType, SessionOrder, change
from memory.timeutil import parse_timestamp, to_epoch
from memory.webhooks.delivery import Delivery
from memory.webhooks.subscriptions import HostPolicy

SECRET = "whsec-0123456789abcdef-test"
ALLOW = "127.0.0.1"


class FakeClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _delivery(service: Epimem, clock: FakeClock, *, node: str = "test", max_age_s: float = 72 * 3600) -> Delivery:
    return Delivery(
        store=service.memory.store.webhooks,
        subscriptions=service.webhooks.subscriptions,
        node_id=node,
        clock=clock,
        backoff=lambda failures: 60.0,
        max_age_s=max_age_s,
        lease_ttl_s=30.0,
    )


def _by_session(events: list[dict]) -> dict[str | None, list[str]]:
    found: dict[str | None, list[str]] = {}
    for event in events:
        found.setdefault(event["session_id"], []).append(event["id"])
    return found


@pytest.mark.slow
def test_every_change_arrives_signed_in_order_with_ids_not_content(
    make_service: Callable[..., Epimem], group_id: str
) -> None:
    marker, corrected, replaced = (f"zq{uuid.uuid4().hex[:10]}" for _ in range(3))
    service = make_service(background=True, webhook_allow_hosts=ALLOW, webhook_poll_s=0.05)
    with WebhookReceiver(SECRET) as receiver, WebhookReceiver(SECRET) as bystander:
        mine = service.create_webhook(receiver.url, SECRET, [f"{group_id}*"], actor="ops")
        service.create_webhook(bystander.url, SECRET, ["someone-else"])
        assert mine.model_dump().keys() >= {"id", "url", "groups"} and "secret" not in mine.model_dump()

        service.add_messages(group_id, "s1", chat("s1", 4, start=T0, marker=marker), actor="app")
        service.add_messages(group_id, "s2", chat("s2", 2, start=T0 + timedelta(days=3)))
        (first, second) = service.flush(group_id, "s1")
        service.flush(group_id, "s2")
        (summary,) = service.generate_summaries(
            group_id, days_back=60, max_memories_per_summary=10, reference_time=REFERENCE
        )
        service.correct_episode(group_id, "s1", first.uuid, title=f"Title {corrected}")
        service.redact_message(group_id, "s1", "s1-0", replacement=f"[gone {replaced}]")
        service.delete_message(group_id, "s1", "s1-3")
        service.import_group(service.export_group(group_id), group_id=f"{group_id}-copy")
        service.set_retention(group_id, {"max_age_days": 30})
        swept = service.sweep_retention(group_id, now=T0 + timedelta(days=31))
        service.delete_session(group_id, "s2")
        service.delete_group(f"{group_id}-copy")

        kinds = [
            "messages.added",
            "messages.added",
            "episodes.formed",
            "episodes.formed",
            "summaries.created",
            "episode.corrected",
            "message.redacted",
            "message.deleted",
            "group.imported",
            "retention.swept",
            "session.deleted",
            "group.deleted",
        ]
        events = receiver.wait_for(lambda found: len(found) >= len(kinds))
        assert [e["type"] for e in events] == kinds
        assert receiver.bad_signatures == 0 and bystander.events() == []
        # Published order is delivered order, for the whole subscription and so for each session.
        assert [e["id"] for e in events] == sorted(e["id"] for e in events)
        assert all(ids == sorted(ids) for ids in _by_session(events).values())
        for delivery in receiver.received:
            assert delivery.headers["x-epimem-event"] == delivery.event["type"]
            assert delivery.headers["x-epimem-delivery"] == delivery.event["id"]
            assert abs(delivery.timestamp - to_epoch(parse_timestamp(delivery.event["time"]))) < 600
            body = delivery.body.decode()
            assert marker not in body and corrected not in body and replaced not in body  # ids, never content
            assert delivery.event["group_id"] in (group_id, f"{group_id}-copy")

        by_type: dict[str, dict] = {}
        for event in events:
            by_type.setdefault(event["type"], event)  # the first of each
        assert by_type["messages.added"]["ids"]["messages"] == ["s1-0", "s1-1", "s1-2", "s1-3"]
        assert by_type["messages.added"]["actor"] == "app"
        assert set(by_type["episodes.formed"]["ids"]["episodes"]) == {first.uuid, second.uuid}
        assert by_type["summaries.created"]["ids"]["summaries"] == [summary.uuid]
        assert by_type["episode.corrected"]["ids"]["episodes"] == [first.uuid]
        assert by_type["message.redacted"]["ids"]["messages"] == ["s1-0"]
        assert by_type["message.redacted"]["ids"]["repaired"] == [first.uuid, summary.uuid]
        assert by_type["message.deleted"]["ids"]["messages"] == ["s1-3"]
        assert sorted(by_type["retention.swept"]["ids"]["messages"]) == sorted(swept.messages)
        assert by_type["session.deleted"]["ids"]["sessions"] == ["s2"]
        assert by_type["group.deleted"]["group_id"] == f"{group_id}-copy"

        # The receiver answers before the worker writes the outcome down: wait for the log to catch up.
        deadline = time.monotonic() + 60
        log = service.webhook_deliveries(mine.id)
        while log.pending and time.monotonic() < deadline:
            time.sleep(0.05)
            log = service.webhook_deliveries(mine.id)
        assert log.pending == 0 and len(log.attempts) == len(kinds)
        assert {a.outcome for a in log.attempts} == {"delivered"} and log.attempts[0].event_id == events[-1]["id"]
        assert "secret" not in log.subscription


@pytest.mark.slow
def test_a_receiver_down_for_an_hour_loses_nothing(make_service: Callable[..., Epimem], group_id: str) -> None:
    """No worker here (background off): the test drives the delivery with its own clock."""
    service = make_service(webhook_allow_hosts=ALLOW)
    receiver = WebhookReceiver(SECRET)  # not up yet: its port refuses connections
    subscription = service.create_webhook(receiver.url, SECRET, [group_id])
    for batch in range(3):
        for session in ("s1", "s2"):
            service.add_messages(group_id, session, chat(f"{session}-{batch}", 2, start=T0 + timedelta(hours=batch)))
    published = 6
    clock = FakeClock(time.time())
    delivery = _delivery(service, clock)

    assert delivery.run_once() == 0
    attempts = service.webhook_deliveries(subscription.id).attempts
    assert [a.outcome for a in attempts] == ["failed"] and attempts[0].error == "ConnectError"
    clock.now += 30  # the backoff (60 s) has not run out: no new attempt
    assert delivery.run_once() == 0 and len(service.webhook_deliveries(subscription.id).attempts) == 1
    for _ in range(60):  # an hour, a try a minute
        clock.now += 60
        assert delivery.run_once() == 0
    log = service.webhook_deliveries(subscription.id, limit=100)
    assert log.pending == published and len(log.attempts) == 61 and {a.outcome for a in log.attempts} == {"failed"}
    assert log.attempts[0].failures == 61

    service.add_messages(group_id, "s1", chat("late", 1, start=T0 + timedelta(days=1)))  # while it is down
    with receiver:
        clock.now += 60
        assert delivery.run_once() == published + 1
    events = receiver.events()
    assert len(events) == published + 1 and [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert [e["ids"]["messages"][0] for e in events if e["session_id"] == "s1"] == [
        "s1-0-0",
        "s1-1-0",
        "s1-2-0",
        "late-0",
    ]
    assert receiver.bad_signatures == 0 and all(d.timestamp == int(clock.now) for d in receiver.received)
    assert service.webhook_deliveries(subscription.id).pending == 0
    delivery.close()


def test_events_too_old_are_dropped_and_logged(make_service: Callable[..., Epimem], group_id: str) -> None:
    service = make_service(webhook_allow_hosts=ALLOW)
    with WebhookReceiver(SECRET) as receiver:
        subscription = service.create_webhook(receiver.url, SECRET, [group_id])
        service.add_messages(group_id, "s1", chat("s1", 2, start=T0))
        clock = FakeClock(time.time() + 73 * 3600)
        delivery = _delivery(service, clock)
        assert delivery.run_once() == 0 and receiver.events() == []
        (attempt,) = service.webhook_deliveries(subscription.id).attempts
        assert attempt.outcome == "expired" and service.webhook_deliveries(subscription.id).pending == 0
        delivery.close()


def test_the_outbox_survives_a_restart(make_service: Callable[..., Epimem], group_id: str) -> None:
    first = make_service(webhook_allow_hosts=ALLOW)  # no delivery worker: nothing leaves
    receiver = WebhookReceiver(SECRET)
    first.create_webhook(receiver.url, SECRET, [group_id])
    first.add_messages(group_id, "s1", chat("s1", 2, start=T0))
    first.flush(group_id, "s1")
    first.close()
    with receiver:
        second = make_service(background=True, webhook_allow_hosts=ALLOW, webhook_poll_s=0.05)
        events = receiver.wait_for(lambda found: len(found) >= 2)
        assert [e["type"] for e in events] == ["messages.added", "episodes.formed"]
        second.close()


def test_two_servers_deliver_each_event_once(make_service: Callable[..., Epimem], group_id: str, backend: str) -> None:
    if backend != "server":
        pytest.skip("several epimem servers share one Chroma server")
    one, two = make_service(webhook_allow_hosts=ALLOW), make_service(webhook_allow_hosts=ALLOW)
    with WebhookReceiver(SECRET) as receiver:
        one.create_webhook(receiver.url, SECRET, [group_id])
        clock = FakeClock(time.time())
        deliveries = [_delivery(one, clock, node="one"), _delivery(two, clock, node="two")]
        for round_ in range(4):
            (one if round_ % 2 else two).add_messages(group_id, "s1", chat(f"r{round_}", 1, start=T0))
            delivered = [d.run_once() for d in deliveries]
            assert sorted(delivered) == [0, 1]  # the lease holder delivers, the other waits
            clock.now += 1
        holder = deliveries[0] if delivered[0] else deliveries[1]
        other = deliveries[1] if holder is deliveries[0] else deliveries[0]
        one.add_messages(group_id, "s1", chat("after", 1, start=T0))
        clock.now += 31  # the holder stopped (it is never called again): its lease runs out
        assert other.run_once() == 1
        ids = [e["ids"]["messages"][0] for e in receiver.events()]
        assert ids == ["r0-0", "r1-0", "r2-0", "r3-0", "after-0"]  # each once, in order
        for d in deliveries:
            d.close()


def test_hosts_need_the_allow_list_and_secrets_stay_secret(
    make_service: Callable[..., Epimem], group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service()
    caplog.set_level(logging.DEBUG)
    refused = [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://10.0.0.5/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::ffff:192.168.1.1]/",
        "ftp://example.com/",
        "http://user:pass@example.com/",
        "not a url",
    ]
    for url in refused:
        with pytest.raises(InvalidInputError):
            service.create_webhook(url, SECRET, [group_id])
    resolver = {"hooks.example": ["10.1.2.3"], "public.example": ["93.184.216.34"]}
    policy = HostPolicy(["10.0.0.5"], resolve=lambda host: resolver[host])
    assert policy.check("http://10.0.0.5/hook") == "http://10.0.0.5/hook"  # named: allowed
    assert policy.check("https://public.example/hook")  # a public address needs no naming
    with pytest.raises(InvalidInputError):  # a name that resolves to a private address
        policy.check("https://hooks.example/hook")
    assert HostPolicy(["hooks.example"], resolve=lambda host: resolver[host]).check("https://hooks.example/x")
    with pytest.raises(InvalidInputError):  # a short secret
        service.create_webhook("http://10.0.0.5/", "short", [group_id])

    allowing = make_service(webhook_allow_hosts=ALLOW)
    with WebhookReceiver(SECRET, status=500) as receiver:
        subscription = allowing.create_webhook(receiver.url, SECRET, [group_id])
        allowing.add_messages(group_id, "s1", chat("s1", 1, start=T0))
        delivery = _delivery(allowing, FakeClock(time.time()))
        assert delivery.run_once() == 0
        delivery.close()
    (attempt,) = allowing.webhook_deliveries(subscription.id).attempts
    assert (attempt.outcome, attempt.status_code, attempt.error) == ("failed", 500, "HTTP 500")
    listed = [s.model_dump() for s in allowing.webhook_subscriptions()]
    assert listed and all("secret" not in s for s in listed)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET not in logged and "whsec" not in logged


def test_a_big_change_is_sent_in_parts() -> None:
    events = change(ChangeType.RETENTION_SWEPT, "g", actor="x", messages=[f"m{i}" for i in range(MAX_IDS * 2 + 1)])
    assert [(e.part, e.parts, len(e.ids.messages)) for e in events] == [(1, 3, MAX_IDS), (2, 3, MAX_IDS), (3, 3, 1)]
    assert [e.id for e in events] == sorted(e.id for e in events)


class Recording:
    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []

    def publish(self, events: list[ChangeEvent]) -> None:
        self.events += events

    def wants(self, group_id: str) -> bool:
        return True


def test_a_formation_waits_for_the_adds_still_announcing_their_messages() -> None:
    """Formation does not wait for adds, so it may form messages whose add has not published its event yet:
    the formation's event waits for it, and the session's events keep the order of its changes."""
    recording = Recording()
    order = SessionOrder(recording)
    formed = change(ChangeType.EPISODES_FORMED, "g", actor="formation", session_id="s", episodes=["e1"])
    with order.adding("g", ["s"]):
        added = change(ChangeType.MESSAGES_ADDED, "g", actor="app", session_id="s", messages=["m1"])
        formation = threading.Thread(target=order.publish, args=(formed,))
        formation.start()
        deadline = time.monotonic() + 60
        while order.waiting == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert recording.events == []  # held back
        order.publish(change(ChangeType.EPISODES_FORMED, "g", actor="formation", session_id="other"))  # not held
        order.publish(added)
    formation.join()
    assert [(e.type, e.session_id) for e in recording.events] == [
        (ChangeType.EPISODES_FORMED, "other"),
        (ChangeType.MESSAGES_ADDED, "s"),
        (ChangeType.EPISODES_FORMED, "s"),
    ]
