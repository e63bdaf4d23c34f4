"""``epimem retention …`` and ``epimem webhooks …``: retention policies and sweeps, webhook subscriptions and
their delivery logs, in process on the data folder (or the Chroma server the settings name), as the HTTP
routes do them (api.http.operations). Changes are signed ``local``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from api.cli.common import AsJson, DataDir, open_service, out, print_json
from memory.lifecycle.retention import AgeBasis, RetentionPolicy

retention = typer.Typer(help="How long a group (or a session) keeps its messages; sweeps with receipts.")
webhooks = typer.Typer(help="Signed change events sent to subscribed URLs.")

Group = Annotated[str, typer.Argument(help="group")]
SessionOption = Annotated[str | None, typer.Option("--session", "-s", help="the session's own policy")]


@retention.command("set")
def set_retention(
    ctx: typer.Context,
    group_id: Group,
    max_age_days: Annotated[float, typer.Option("--max-age-days", help="erase messages older than this")],
    by: Annotated[
        AgeBasis, typer.Option("--by", help="age by the messages' timestamps or by arrival")
    ] = AgeBasis.TIMESTAMP,
    session: SessionOption = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Set the group's (or a session's) retention; the next sweep erases what is older."""
    with open_service(ctx, data_dir) as service:
        stored = service.set_retention(group_id, RetentionPolicy(max_age_days=max_age_days, by=by), session_id=session)
    if as_json:
        print_json(stored)
        return
    out.print(f"{group_id}{'/' + session if session else ''}: keep {max_age_days:g} days (by {by.value})")


@retention.command("show")
def show_retention(ctx: typer.Context, group_id: Group, data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """The group's policy and its sessions' own ones."""
    with open_service(ctx, data_dir) as service:
        found = service.retention(group_id)
    if as_json:
        print_json(found)
        return
    table = Table(title=f"retention of {group_id}")
    for column in ("scope", "max age (days)", "by", "updated"):
        table.add_column(column)
    for policy in ([found.group] if found.group else []) + found.sessions:
        scope = f"session {policy.session_id}" if policy.session_id else "group"
        table.add_row(scope, f"{policy.max_age_days:g}", policy.by.value, policy.updated_at.strftime("%Y-%m-%d %H:%M"))
    out.print(table)


@retention.command("clear")
def clear_retention(
    ctx: typer.Context, group_id: Group, session: SessionOption = None, data_dir: DataDir = None
) -> None:
    """Remove the group's (or a session's) policy."""
    with open_service(ctx, data_dir) as service:
        cleared = service.clear_retention(group_id, session_id=session)
    out.print("cleared" if cleared else "there was no policy")


@retention.command("sweep")
def sweep(
    ctx: typer.Context,
    group_id: Group,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be erased, change nothing")] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Erase now what the group's policies say is too old (or preview it)."""
    with open_service(ctx, data_dir) as service:
        receipt = service.sweep_retention(group_id, dry_run=dry_run)
    if as_json:
        print_json(receipt)
        return
    counts = ", ".join(f"{count} {name}" for name, count in receipt.counts.items())
    out.print(f"{'would erase' if dry_run else 'erased'}: {counts}")


@webhooks.command("create")
def create_webhook(
    ctx: typer.Context,
    url: Annotated[str, typer.Option("--url", help="where the events are POSTed")],
    secret: Annotated[str, typer.Option("--secret", envvar="EPIMEM_WEBHOOK_SECRET", help="signs every delivery")],
    groups: Annotated[list[str], typer.Option("--group", "-g", help="a group or a prefix* (repeatable; '*': all)")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Subscribe a URL to the change events of groups."""
    with open_service(ctx, data_dir) as service:
        subscription = service.create_webhook(url, secret, groups)
    if as_json:
        print_json(subscription.public())
        return
    out.print(f"webhook {subscription.id} created")


@webhooks.command("list")
def list_webhooks(ctx: typer.Context, data_dir: DataDir = None, as_json: AsJson = False) -> None:
    with open_service(ctx, data_dir) as service:
        found = [subscription.public() for subscription in service.webhook_subscriptions()]
    if as_json:
        print_json(found)
        return
    table = Table(title="webhooks")
    for column in ("id", "url", "groups", "created"):
        table.add_column(column, overflow="fold")
    for row in found:
        table.add_row(str(row["id"]), str(row["url"]), ", ".join(map(str, row["groups"])), str(row["created_at"]))  # type: ignore[call-overload]
    out.print(table)


@webhooks.command("delete")
def delete_webhook(ctx: typer.Context, subscription_id: str, data_dir: DataDir = None) -> None:
    """Remove a subscription and its undelivered events."""
    with open_service(ctx, data_dir) as service:
        service.delete_webhook(subscription_id)
    out.print(f"webhook {subscription_id} removed")


@webhooks.command("deliveries")
def deliveries(
    ctx: typer.Context, subscription_id: str, limit: int = 20, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """The last delivery attempts, newest first."""
    with open_service(ctx, data_dir) as service:
        found = service.webhook_deliveries(subscription_id, limit=limit)
    if as_json:
        print_json(found)
        return
    table = Table(title=f"webhook {subscription_id}: {found.pending} waiting")
    for column in ("at", "event", "type", "outcome", "status", "error"):
        table.add_column(column, overflow="fold")
    for attempt in found.attempts:
        status = "" if attempt.status_code is None else str(attempt.status_code)
        table.add_row(attempt.at, attempt.event_id, attempt.event_type, attempt.outcome, status, attempt.error or "")
    out.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(retention, name="retention")
    app.add_typer(webhooks, name="webhooks")
