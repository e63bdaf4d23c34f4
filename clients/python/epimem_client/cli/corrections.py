"""``epimem correct``, ``revisions``, ``redact`` and ``audit``: correcting memory from the command line (on a
running epimem the changes are signed by the key's actor; in process on a data folder, ``local``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from epimem_client.cli.output import answer, more, short, table, text
from epimem_client.cli.recall import AsJson
from epimem_client.cli.target import DataDir, Key, Url, open_memory


def correct(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    session_id: Annotated[str, typer.Argument(help="session")],
    episode_id: Annotated[str, typer.Argument(help="episode")],
    title: Annotated[str | None, typer.Option(help="the right title")] = None,
    content: Annotated[str | None, typer.Option(help="the right text")] = None,
    reason: Annotated[str | None, typer.Option(help="why (kept with the revision)")] = None,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Correct an episode's title or text; the earlier one stays in its revisions."""
    with open_memory(ctx, url, key, data_dir) as service:
        episode = service.correct_episode(group_id, session_id, episode_id, title=title, content=content, reason=reason)
    answer(episode, as_json, lambda e: f"corrected {e.uuid}: {e.title}")


def revisions(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    session_id: Annotated[str, typer.Argument(help="session")],
    episode_id: Annotated[str, typer.Argument(help="episode")],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """An episode's revisions, oldest first (0 is the generated episode)."""
    with open_memory(ctx, url, key, data_dir) as service:
        found = service.episode_revisions(group_id, session_id, episode_id)
    rows = [_revision_row(revision) for revision in found]
    columns = ("#", "kind", "when", "by", "title", "reason")
    answer(found, as_json, lambda _: table(f"revisions of {episode_id}", columns, rows))


def _revision_row(revision: Any) -> tuple[object, ...]:
    kind = text(revision.kind) + (" (superseded)" if revision.superseded else "") + (" (erased)" * revision.erased)
    when = revision.changed_at.strftime("%Y-%m-%d %H:%M")
    return revision.revision, kind, when, revision.changed_by, short(revision.title), revision.reason


def redact(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    session_id: Annotated[str, typer.Argument(help="session")],
    message_id: Annotated[str, typer.Argument(help="message")],
    replacement: Annotated[str, typer.Option(help="the text that takes its place")] = "[redacted]",
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Replace a message's text for good (its id, speaker and time stay); what was built from it is rebuilt."""
    with open_memory(ctx, url, key, data_dir) as service:
        if not yes:
            typer.confirm(f"Remove the text of message {message_id!r} of session {session_id!r} for good?", abort=True)
        receipt = service.redact_message(group_id, session_id, message_id, replacement=replacement)
    if receipt.redacted:
        said = f"redacted {message_id}; rebuilt episodes: {', '.join(receipt.episodes) or '-'}"
    else:
        said = f"message {message_id} was redacted already: nothing changed"
    answer(receipt, as_json, lambda _: said)


def audit(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """The group's audit trail, newest first (who changed what, when; never the content)."""
    with open_memory(ctx, url, key, data_dir) as service:
        page = service.audit(group_id, limit=limit, cursor=cursor)
    rows = [_audit_row(entry) for entry in page.entries]
    columns = ("when", "actor", "action", "session", "targets")
    answer(page, as_json, lambda _: table(f"audit trail of {group_id}", columns, rows))
    if not as_json:
        more(page.next_cursor)


def _audit_row(entry: Any) -> tuple[object, ...]:
    targets = ", ".join(entry.target_ids) + (
        f" (+{entry.target_count - len(entry.target_ids)})" * (entry.target_count > len(entry.target_ids))
    )
    if entry.counts:  # a retention sweep's receipt (its ids: --json)
        targets += "; " + ", ".join(f"{count} {kind}" for kind, count in entry.counts.items())
    return f"{entry.at:%Y-%m-%d %H:%M:%S}", entry.actor, entry.action, entry.session_id, targets


def register(app: typer.Typer) -> None:
    for command in (correct, revisions, redact, audit):
        app.command()(command)
