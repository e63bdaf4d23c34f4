"""What every ``epimem`` command shares: the consoles, the common options, the in-process service
on the data folder with its errors as one plain line, JSON output, progress bars."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.cli.startup import StartupError, check_data_dir
from api.facade import Epimem
from api.settings import Settings
from memory.embedding.lazy import LazyEmbedder
from memory.errors import EpimemError
from retrieval.filters import RecallFilter

out = Console()
err = Console(stderr=True)

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="EPIMEM_DATA_DIR", help="data folder (default ./data)", show_default=False),
]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
Session = Annotated[str | None, typer.Option("--session", "-s", help="only this session")]
Speakers = Annotated[
    list[str] | None, typer.Option("--speaker", help="only what this speaker said (id or a known name; repeatable)")
]


def speaker_filter(speakers: list[str] | None) -> RecallFilter | None:
    return RecallFilter(speakers=speakers) if speakers else None


def settings_for(data_dir: Path | None) -> Settings:
    return Settings(data_dir=data_dir) if data_dir is not None else Settings()


@contextmanager
def open_service(ctx: typer.Context, data_dir: Path | None) -> Iterator[Epimem]:
    # ctx.obj may carry an already loaded embedder (tests, or a host program invoking the CLI).
    embedder = (ctx.obj or {}).get("embedder") if isinstance(ctx.obj, dict) else None
    settings = settings_for(data_dir)
    try:
        if settings.chroma_host is None:
            check_data_dir(settings.data_dir)
        service = Epimem.from_settings(settings, background=False, embedder=embedder)
        if isinstance(service.embedder, LazyEmbedder):  # say what the wait is for, if the command needs the model
            service.embedder.announce = lambda: err.print("loading the embedding model…", style="dim")
    except StartupError as error:
        fail(str(error), 1)
    except EpimemError as error:  # e.g. the folder is held by a running server
        fail(error.message, 1, code=error.code)
    try:
        yield service
    except EpimemError as error:
        fail(error.message, 1, code=error.code)
    except ValueError as error:  # bad input caught by validation (ids, query fields)
        fail(str(error), 1, code="invalid_input")
    finally:
        service.close()


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
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def fail(message: str, status: int = 2, *, code: str | None = None) -> NoReturn:
    """One plain line on stderr and a non-zero exit: no traceback for a mistake the user can fix. Every
    command says it the same way: ``error (code): message``, or ``error: message`` for a mistake with no
    code of the HTTP API (a bad option, a data folder that cannot be used)."""
    typer.echo(f"error ({code}): {message}" if code else f"error: {message}", err=True)
    raise typer.Exit(status)


def progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
