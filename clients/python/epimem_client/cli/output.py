"""What every command prints and how it fails: the two consoles (tables on stdout, notes on stderr), a command's
answer (JSON with ``--json``, else a table or a line), errors as one plain line (``error (code): message``), short
text for table cells."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console, RenderableType
from rich.table import Table

out = Console()
err = Console(stderr=True)


def fail(message: str, status: int = 2, *, code: str | None = None) -> NoReturn:
    """One plain line on stderr and a non-zero exit: no traceback for a mistake the user can fix. Every
    command says it the same way: ``error (code): message``, or ``error: message`` for a mistake with no
    code of the HTTP API (a bad option, a data folder that cannot be used)."""
    typer.echo(f"error ({code}): {message}" if code else f"error: {message}", err=True)
    raise typer.Exit(status)


def one_line(error: ValueError) -> str:
    """A validation error as one line: ``field: what is wrong`` for each problem (pydantic's own text spans
    several lines and ends with a link)."""
    if isinstance(error, ValidationError):
        problems = []
        for problem in error.errors(include_url=False):
            where = ".".join(str(part) for part in problem["loc"])
            message = str(problem["msg"]).removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        return "; ".join(problems)
    return " ".join(str(error).split())


def answer(result: Any, as_json: bool, human: Callable[[Any], RenderableType]) -> None:
    """What a command prints: ``result`` as JSON with ``--json``, else what ``human`` makes of it (a table, a
    line)."""
    if as_json:
        print_json(result)
    else:
        out.print(human(result))


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]], *, fold: bool = True) -> Table:
    """Rows under named columns, each cell as ``text`` shows it; long cells wrap (``fold``) or are cut."""
    shown = Table(title=title)
    for column in columns:
        shown.add_column(column, overflow="fold" if fold else "ellipsis")
    for row in rows:
        shown.add_row(*("" if cell is None else text(cell) for cell in row))
    return shown


def more(next_cursor: str | None) -> None:
    """Where a paged listing goes on (not with ``--json``: the JSON holds ``next_cursor``)."""
    if next_cursor:
        out.print(f"more: --cursor {next_cursor}")


def print_json(value: Any) -> None:
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2)
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=json_default)
    sys.stdout.write(text + "\n")


def json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # the facade's receipts
        return dataclasses.asdict(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def text(value: object) -> str:
    """A value as a table shows it: an enum of the facade by its value, as the client's models hold it."""
    return str(value.value) if isinstance(value, Enum) else str(value)


def short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
