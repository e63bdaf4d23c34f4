"""``epimem import``, ``export`` and ``stats``: a group's memory in and out, and what each group holds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from epimem_client.cli.files import exported_group, file_kind, message_batches
from epimem_client.cli.output import answer, err, table
from epimem_client.cli.recall import AsJson
from epimem_client.cli.target import SERVER_INSTALL, Batches, DataDir, Key, Url, open_memory, reader_of
from epimem_client.errors import InvalidInputError

Totals = dict[str, Any]


def progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def import_(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="LoCoMo JSON, messages JSONL or an export")],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="import into this group (LoCoMo: only one sample)")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Import conversations: JSON Lines of messages (each with group_id and session_id), a group export, or a
    LoCoMo file (one group per sample; server install). Idempotent: a re-run adds nothing."""
    kind = file_kind(path)
    totals: Totals = {"kind": kind, "groups": set(), "sessions": 0, "messages": 0, "episodes": 0}
    with open_memory(ctx, url, key, data_dir) as memory:
        if kind == "export":
            receipt = memory.import_group(_lines(path), group_id=group or exported_group(path))
            totals["groups"].add(receipt.group_id)
            for name in ("sessions", "messages", "episodes"):
                totals[name] += getattr(receipt, name)
        else:
            _add(memory, _batches(ctx, kind, path, group), totals)
    totals["groups"] = sorted(totals["groups"])
    row = (kind, ", ".join(totals["groups"]), *(totals[k] for k in ("sessions", "messages", "episodes")))
    columns = ("kind", "groups", "sessions", "messages", "new episodes")
    answer(totals, as_json, lambda _: table(f"imported {path.name}", columns, [row], fold=False))


def _lines(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as lines:
        return [line for line in lines if line.strip()]


def _batches(ctx: typer.Context, kind: str, path: Path, group: str | None) -> Batches:
    if kind == "messages":
        return message_batches(path, group)
    reader = reader_of(ctx, kind)
    if reader is None:
        raise InvalidInputError(
            f"{path} is a {kind} file, which only the server install reads ({SERVER_INSTALL}); "
            "JSON Lines of messages and exports import anywhere"
        )
    return reader(path, group)


def _add(memory: Any, batches: Batches, totals: Totals) -> None:
    """Each session's messages added, then its episodes formed (the same calls over HTTP and in process). New
    episodes are counted per group, before and after: a server forms some while the messages arrive."""
    batches = list(batches)
    before: dict[str, int] = {}
    with progress() as bar:
        task = bar.add_task("sessions", total=len(batches))
        for group_id, session_id, messages in batches:
            if group_id not in before:
                before[group_id] = _episodes(memory, group_id)
            memory.add_messages(group_id, session_id, messages)
            memory.flush(group_id, session_id)
            totals["sessions"] += 1
            totals["messages"] += len(messages)
            bar.advance(task)
    totals["groups"].update(before)
    totals["episodes"] += sum(_episodes(memory, group_id) - count for group_id, count in before.items())


def _episodes(memory: Any, group_id: str) -> int:
    return int(memory.group_stats(group_id).episodes) if memory.group_exists(group_id) else 0


def export(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file (default: standard output)")] = None,
    include_embeddings: Annotated[bool, typer.Option("--include-embeddings", help="also write the vectors")] = False,
) -> None:
    """Write a group as JSON Lines (import it again with `epimem import`)."""
    with open_memory(ctx, url, key, data_dir) as memory:
        lines = (
            line if line.endswith("\n") else line + "\n"
            for line in memory.export_group(group_id, include_embeddings=include_embeddings)
        )
        if output is None:
            sys.stdout.writelines(lines)
            return
        count = 0
        with output.open("w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line)
                count += 1
        err.print(f"wrote {count} lines to {output}")


def stats(
    ctx: typer.Context,
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """The groups (those the key can read) with their sessions, messages and episodes."""
    with open_memory(ctx, url, key, data_dir) as memory:
        groups = [memory.group_stats(group_id) for group_id in memory.list_groups()]
    rows = [(g.group_id, g.sessions, g.messages, g.episodes, g.pending) for g in groups]
    columns = ("group", "sessions", "messages", "episodes", "pending")
    answer({"groups": groups}, as_json, lambda _: table(f"{len(groups)} groups", columns, rows, fold=False))


def register(app: typer.Typer) -> None:
    app.command("import")(import_)
    app.command()(export)
    app.command()(stats)
