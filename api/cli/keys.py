"""``epimem keys create|list|revoke|rotate|limits|group-limits|usage``: keys and limits of a running epimem,
over HTTP (``--url`` or ``EPIMEM_URL``, an admin key for every group from ``EPIMEM_API_KEY`` or ``--key``;
none in local mode). A new key's secret is printed once, when it is made or rotated."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from api.cli.common import AsJson, answer, fail, out, print_json, table
from epimem_client import EpimemClient, EpimemError
from epimem_client.keys import GroupUsageOut, KeyAdmin, KeyCreated, KeyOut

keys_app = typer.Typer(help="API keys and limits of a running epimem (an admin key for every group).")

Url = Annotated[str, typer.Option("--url", envvar="EPIMEM_URL", help="the running epimem")]
Key = Annotated[
    str | None, typer.Option("--key", "--api-key", envvar="EPIMEM_API_KEY", help="an admin key for every group")
]
KeyId = Annotated[str, typer.Argument(help="the key's id (key-…)")]
PerSecond = Annotated[float | None, typer.Option("--requests-per-second", help="limit (per server)")]
PerDay = Annotated[int | None, typer.Option("--messages-per-day", help="limit (UTC days, every server)")]
DEFAULT_URL = "http://127.0.0.1:8000"


@contextmanager
def _admin(url: str, key: str | None) -> Iterator[KeyAdmin]:
    try:
        with EpimemClient(url, api_key=key) as client:
            yield KeyAdmin(client)
    except EpimemError as error:
        fail(error.message, 1, code=error.code)


def _limits(
    requests_per_second: float | None, messages_per_day: float | None, stored_chars: float | None = None
) -> dict[str, float]:
    """The limits given on the command line (one not given: the server's default)."""
    given = {
        "requests_per_second": requests_per_second,
        "messages_per_day": messages_per_day,
        "stored_chars": stored_chars,
    }
    return {name: value for name, value in given.items() if value is not None}


def _row(key: KeyOut) -> list[str]:
    limits = ", ".join(f"{name}={value:g}" for name, value in sorted(key.effective_limits.items())) or "-"
    expires = key.expires_at.strftime("%Y-%m-%d %H:%M") if key.expires_at else "-"
    today = str(key.usage.get("messages_today", 0))
    return [key.id, key.name, key.role, ", ".join(key.groups), key.status, expires, limits, today]


def _table(keys: list[KeyOut]) -> Table:
    return table("API keys", ("id", "name", "role", "groups", "status", "expires", "limits", "today"), map(_row, keys))


def _secret(made: KeyCreated, as_json: bool, what: str) -> None:
    if as_json:
        print_json(made)
        return
    out.print(f"{what} {made.id} ({made.name}, {made.role} of {', '.join(made.groups)}).")
    out.print("Its secret, shown this once (keep it; epimem stores only a salted hash):")
    typer.echo(made.key)


@keys_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="who the key is (the audit trail signs its changes with it)")],
    group: Annotated[list[str], typer.Option("--group", "-g", help="a group id, or a prefix ending in '*'")],
    role: Annotated[str, typer.Option(help="read, write or admin")] = "read",
    requests_per_second: PerSecond = None,
    messages_per_day: PerDay = None,
    expires: Annotated[datetime | None, typer.Option(help="refused from this time on (ISO, UTC)")] = None,
    url: Url = DEFAULT_URL,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Make a key; it works at once on every server of the deployment."""
    with _admin(url, key) as admin:
        made = admin.create(
            name, group, role, expires_at=expires, limits=_limits(requests_per_second, messages_per_day)
        )
    _secret(made, as_json, "made")


@keys_app.command("list")
def list_keys(url: Url = DEFAULT_URL, key: Key = None, as_json: AsJson = False) -> None:
    """Every key (never a secret), with its limits and today's messages."""
    with _admin(url, key) as admin:
        found = admin.list()
    answer(found, as_json, _table)


@keys_app.command("revoke")
def revoke(key_id: KeyId, url: Url = DEFAULT_URL, key: Key = None, as_json: AsJson = False) -> None:
    """Refuse a key from now on (on every server within a second)."""
    with _admin(url, key) as admin:
        revoked = admin.revoke(key_id)
    answer(revoked, as_json, lambda r: f"revoked {r.id} ({r.name})")


@keys_app.command("rotate")
def rotate(key_id: KeyId, url: Url = DEFAULT_URL, key: Key = None, as_json: AsJson = False) -> None:
    """A new secret for a key (same id, name, groups and limits); the old one is refused."""
    with _admin(url, key) as admin:
        made = admin.rotate(key_id)
    _secret(made, as_json, "rotated")


@keys_app.command("limits")
def key_limits(
    key_id: KeyId,
    requests_per_second: PerSecond = None,
    messages_per_day: PerDay = None,
    url: Url = DEFAULT_URL,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Replace a key's limits (none given: the server's defaults)."""
    with _admin(url, key) as admin:
        changed = admin.set_limits(key_id, _limits(requests_per_second, messages_per_day))
    answer(changed, as_json, lambda c: _table([c]))


def _group_table(found: GroupUsageOut) -> Table:
    used = {"messages_per_day": "messages_today", "stored_chars": "stored_chars"}
    rows = []
    for name in ("requests_per_second", "messages_per_day", "stored_chars"):
        value = found.effective_limits.get(name)
        use = found.usage.get(used.get(name, ""), None)
        rows.append((name, "-" if value is None else f"{value:g}", "-" if use is None else str(use)))
    return table(f"group {found.group_id}", ("limit", "value", "used"), rows, fold=False)


@keys_app.command("group-limits")
def group_limits(
    group_id: Annotated[str, typer.Argument(help="the group")],
    requests_per_second: PerSecond = None,
    messages_per_day: PerDay = None,
    stored_chars: Annotated[int | None, typer.Option("--stored-chars", help="limit on its messages")] = None,
    url: Url = DEFAULT_URL,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Replace a group's limits (none given: the server's defaults)."""
    with _admin(url, key) as admin:
        found = admin.set_group_limits(group_id, _limits(requests_per_second, messages_per_day, stored_chars))
    answer(found, as_json, _group_table)


@keys_app.command("usage")
def usage(
    group_id: Annotated[
        str | None, typer.Argument(help="one group's limits and use (default: every key and group)")
    ] = None,
    url: Url = DEFAULT_URL,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Messages added today by every key and group, or one group's limits and use."""
    with _admin(url, key) as admin:
        if group_id is not None:
            answer(admin.group_usage(group_id), as_json, _group_table)
            return
        found = admin.usage()
    rows = [(row.kind, row.id, row.messages_today) for row in found.rows]
    answer(found, as_json, lambda f: table(f"messages added on {f.day} (UTC)", ("kind", "id", "messages"), rows))


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
