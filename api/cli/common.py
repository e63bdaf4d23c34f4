"""What the server's commands share: the data folder in process (the ``Local`` of the thin client's data
commands, ``epimem_client.cli.target``), the readers of files only the server parses (LoCoMo), settings
from the options, progress bars. The facade and the readers load only when a command works on a data folder:
a command on a running epimem (``--url``) loads neither the model nor Chroma."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from epimem_client.cli.groups import progress
from epimem_client.cli.output import answer, err, fail, out, print_json, table
from epimem_client.cli.recall import AsJson
from epimem_client.cli.target import Batches, Local, one_line_errors
from epimem_client.errors import InvalidInputError

if TYPE_CHECKING:  # loaded by the commands that run in process: a command with --url never imports them
    from api.facade import Epimem
    from api.settings import Settings

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="EPIMEM_DATA_DIR", help="data folder (default ./data)", show_default=False),
]

__all__ = [
    "AsJson",
    "DataDir",
    "answer",
    "err",
    "fail",
    "local",
    "open_service",
    "out",
    "print_json",
    "progress",
    "settings_for",
    "table",
]


def settings_for(data_dir: Path | None) -> Settings:
    """The command's settings (``api.settings.load_settings``), with its ``--data-dir`` where given."""
    from api.settings import load_settings

    return load_settings(**({"data_dir": data_dir} if data_dir is not None else {}))


@contextmanager
def open_service(ctx: typer.Context, data_dir: Path | None) -> Iterator[Epimem]:
    """The facade on the data folder (or the Chroma server of ``EPIMEM_CHROMA_HOST``), closed after the command;
    every epimem error, opening or inside the block, said in one line (``one_line_errors``)."""
    from api.cli.startup import StartupError, check_data_dir
    from api.facade import Epimem
    from memory.embedding.lazy import LazyEmbedder

    # ctx.obj may carry an already loaded embedder (tests, or a host program invoking the CLI).
    obj = ctx.find_root().obj
    embedder = obj.get("embedder") if isinstance(obj, dict) else None
    settings = settings_for(data_dir)
    try:
        if settings.chroma_host is None:
            check_data_dir(settings.data_dir)
    except StartupError as error:
        fail(str(error), 1)
    with one_line_errors():
        service = Epimem.from_settings(settings, background=False, embedder=embedder)
        if isinstance(service.embedder, LazyEmbedder):  # say what the wait is for, if the command needs the model
            service.embedder.announce = lambda: err.print("loading the embedding model…", style="dim")
        try:
            yield service
        finally:
            service.close()


def locomo_batches(path: Path, group: str | None) -> Batches:
    """A LoCoMo file as (group, session, messages) batches: one group per sample (``group``: the only one)."""
    from memory.ingest.importers import read_locomo

    samples = read_locomo(path)
    if group is not None and len(samples) != 1:
        raise InvalidInputError(f"--group needs a file with one sample; this one has {len(samples)}")
    return [
        (group or sample.sample_id, session_id, messages)
        for sample in samples
        for session_id, messages in sample.sessions.items()
    ]


def local() -> Local:
    """What the server install adds to the thin client's data commands."""
    return Local(open=open_service, readers={"locomo": locomo_batches})
