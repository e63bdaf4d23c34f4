"""``epimem retention set|show|clear|sweep`` and ``epimem webhooks create|list|deliveries|delete``: retention
policies and sweeps, webhook subscriptions and their delivery logs. On a running epimem (``--url`` /
``EPIMEM_URL``, a key from ``--key`` / ``EPIMEM_API_KEY``: an admin of the group for retention, of every group
for webhooks; changes signed with the key's name), or in process on a data folder (server install; signed
``local``): the same methods on either (``epimem_client.cli.target``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from epimem_client.cli.output import answer, out, table
from epimem_client.cli.recall import AsJson
from epimem_client.cli.target import DataDir, Key, Url, open_memory

retention = typer.Typer(help="How long a group (or a session) keeps its messages; sweeps with receipts.")
webhooks = typer.Typer(help="Signed change events sent to subscribed URLs.")

Group = Annotated[str, typer.Argument(help="group")]
SessionOption = Annotated[str | None, typer.Option("--session", "-s", help="the session's own policy")]


class AgeBasis(StrEnum):
    timestamp = "timestamp"  # the messages' own time
    arrival = "arrival"  # when epimem received them


@retention.command("set")
def set_retention(
    ctx: typer.Context,
    group_id: Group,
    max_age_days: Annotated[float, typer.Option("--max-age-days", help="erase messages older than this")],
    by: Annotated[
        AgeBasis, typer.Option("--by", help="age by the messages' timestamps or by arrival")
    ] = AgeBasis.timestamp,
    session: SessionOption = None,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Set the group's (or a session's) retention; the next sweep erases what is older."""
    policy = {"max_age_days": max_age_days, "by": by.value}
    with open_memory(ctx, url, key, data_dir) as memory:
        stored = memory.set_retention(group_id, policy, session_id=session)
    said = f"{group_id}{'/' + session if session else ''}: keep {max_age_days:g} days (by {by.value})"
    answer(stored, as_json, lambda _: said)


@retention.command("show")
def show_retention(
    ctx: typer.Context,
    group_id: Group,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """The group's policy and its sessions' own ones."""
    with open_memory(ctx, url, key, data_dir) as memory:
        found = memory.retention(group_id)
    rows = [
        (
            f"session {p.session_id}" if p.session_id else "group",
            f"{p.max_age_days:g}",
            p.by,
            f"{p.updated_at:%Y-%m-%d %H:%M}",
        )
        for p in ([found.group] if found.group else []) + found.sessions
    ]
    columns = ("scope", "max age (days)", "by", "updated")
    answer(found, as_json, lambda _: table(f"retention of {group_id}", columns, rows, fold=False))


@retention.command("clear")
def clear_retention(
    ctx: typer.Context,
    group_id: Group,
    session: SessionOption = None,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
) -> None:
    """Remove the group's (or a session's) policy."""
    with open_memory(ctx, url, key, data_dir) as memory:
        cleared = memory.clear_retention(group_id, session_id=session)
    out.print("cleared" if cleared else "there was no policy")


@retention.command("sweep")
def sweep(
    ctx: typer.Context,
    group_id: Group,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be erased, change nothing")] = False,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Erase now what the group's policies say is too old (or preview it); the receipt lists ids and counts."""
    with open_memory(ctx, url, key, data_dir) as memory:
        receipt = memory.sweep_retention(group_id, dry_run=dry_run)
    counts = ", ".join(f"{count} {name}" for name, count in receipt.counts.items())
    answer(receipt, as_json, lambda _: f"{'would erase' if dry_run else 'erased'}: {counts}")


@webhooks.command("create")
def create_webhook(
    ctx: typer.Context,
    receiver: Annotated[str, typer.Argument(help="where the events are POSTed (http or https)")],
    secret: Annotated[str, typer.Option("--secret", envvar="EPIMEM_WEBHOOK_SECRET", help="signs every delivery")],
    groups: Annotated[list[str], typer.Option("--group", "-g", help="a group or a prefix* (repeatable; '*': all)")],
    description: Annotated[str | None, typer.Option(help="what it is for")] = None,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Subscribe a URL to the change events of groups (its secret is never shown again)."""
    with open_memory(ctx, url, key, data_dir) as memory:
        subscription = memory.create_webhook(receiver, secret, groups, description=description)
    answer(subscription, as_json, lambda s: f"webhook {s.id} created")


@webhooks.command("list")
def list_webhooks(
    ctx: typer.Context, url: Url = None, key: Key = None, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """Every subscription (never a secret)."""
    with open_memory(ctx, url, key, data_dir) as memory:
        found = memory.webhook_subscriptions()
    rows = [(row.id, row.url, ", ".join(row.groups), row.created_at, row.created_by) for row in found]
    answer(found, as_json, lambda _: table("webhooks", ("id", "url", "groups", "created", "by"), rows))


@webhooks.command("delete")
def delete_webhook(
    ctx: typer.Context, subscription_id: str, url: Url = None, key: Key = None, data_dir: DataDir = None
) -> None:
    """Remove a subscription and its undelivered events."""
    with open_memory(ctx, url, key, data_dir) as memory:
        memory.delete_webhook(subscription_id)
    out.print(f"webhook {subscription_id} removed")


@webhooks.command("deliveries")
def deliveries(
    ctx: typer.Context,
    subscription_id: str,
    limit: Annotated[int, typer.Option(min=1, max=100, help="how many attempts")] = 20,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """The last delivery attempts, newest first, and how many events wait."""
    with open_memory(ctx, url, key, data_dir) as memory:
        found = memory.webhook_deliveries(subscription_id, limit=limit)
    rows = [(a.at, a.event_id, a.event_type, a.outcome, a.status_code, a.error) for a in found.attempts]
    title = f"webhook {subscription_id}: {found.pending} waiting"
    answer(found, as_json, lambda _: table(title, ("at", "event", "type", "outcome", "status", "error"), rows))


def register(app: typer.Typer) -> None:
    app.add_typer(retention, name="retention")
    app.add_typer(webhooks, name="webhooks")
