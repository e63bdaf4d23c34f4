"""``epimem import``: a LoCoMo file (one group per sample), JSON Lines of messages (each line with its
group_id and session_id) or a group export. Idempotent: a re-run adds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from api.cli.common import AsJson, DataDir, open_service, out, print_json, progress
from api.cli.files import check_messages_file, file_kind
from api.facade import Epimem
from memory.errors import EpimemError
from memory.ingest.importers import read_jsonl, read_locomo

Totals = dict[str, Any]


def import_(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="LoCoMo JSON, messages JSONL or an export")],
    data_dir: DataDir = None,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="import into this group (LoCoMo: only one sample)")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Import conversations: a LoCoMo file (one group per sample), JSON Lines of messages (each with
    group_id and session_id), or a group export. Idempotent: a re-run adds nothing."""
    kind = file_kind(path)
    totals: Totals = {"kind": kind, "groups": set(), "sessions": 0, "messages": 0, "episodes": 0}
    with open_service(ctx, data_dir) as memory:
        {"export": _export, "locomo": _locomo}.get(kind, _messages)(memory, path, group, totals)
    totals["groups"] = sorted(totals["groups"])
    if as_json:
        print_json(totals)
        return
    table = Table(title=f"imported {path.name}")
    for column in ("kind", "groups", "sessions", "messages", "new episodes"):
        table.add_column(column)
    table.add_row(kind, ", ".join(totals["groups"]), *(str(totals[k]) for k in ("sessions", "messages", "episodes")))
    out.print(table)


def _count(totals: Totals, group_id: str, *, sessions: int, messages: int, episodes: int) -> None:
    totals["groups"].add(group_id)
    totals["sessions"] += sessions
    totals["messages"] += messages
    totals["episodes"] += episodes


def _export(memory: Epimem, path: Path, group: str | None, totals: Totals) -> None:
    with path.open(encoding="utf-8") as lines:
        receipt = memory.import_group(lines, group_id=group)
    _count(totals, receipt.group_id, sessions=receipt.sessions, messages=receipt.messages, episodes=receipt.episodes)


def _locomo(memory: Epimem, path: Path, group: str | None, totals: Totals) -> None:
    samples = read_locomo(path)
    if group is not None and len(samples) != 1:
        raise EpimemError(f"--group needs a file with one sample; this one has {len(samples)}")
    with progress() as bar:
        task = bar.add_task("samples", total=len(samples))
        for sample in samples:
            episodes = memory.ingest_locomo(sample, group_id=group)
            target = group or sample.sample_id
            _count(totals, target, sessions=len(sample.sessions), messages=len(sample.messages), episodes=len(episodes))
            bar.advance(task)


def _messages(memory: Epimem, path: Path, group: str | None, totals: Totals) -> None:
    check_messages_file(path)
    batches = list(read_jsonl(path))
    with progress() as bar:
        task = bar.add_task("sessions", total=len(batches))
        for group_id, session_id, messages in batches:
            target = group or group_id
            memory.add_messages(target, session_id, messages)
            episodes = memory.flush(target, session_id)
            _count(totals, target, sessions=1, messages=len(messages), episodes=len(episodes))
            bar.advance(task)


def register(app: typer.Typer) -> None:
    app.command("import")(import_)
