"""Where a command finds memory: a running epimem (``--url`` / ``EPIMEM_URL``, with ``--key`` /
``EPIMEM_API_KEY``), reached through ``EpimemClient``; or, with the server install only, a data folder opened
in process (``--data-dir`` / ``EPIMEM_DATA_DIR``, ``./data`` by default). The commands call the same methods
on either (the client has the Python facade's method names), so each command is written once.

The server install puts a ``Local`` in the command's context (``api.cli.main``); without it, a command with no
URL says what to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from epimem_client.cli.output import fail, one_line
from epimem_client.client import EpimemClient
from epimem_client.errors import EpimemError

SERVER_INSTALL = "pip install epimem-server (from a clone: pip install -e .)"

Url = Annotated[
    str | None,
    typer.Option("--url", envvar="EPIMEM_URL", help="a running epimem, e.g. http://127.0.0.1:8000", show_default=False),
]
Key = Annotated[
    str | None,
    typer.Option("--key", "--api-key", envvar="EPIMEM_API_KEY", help="API key for --url", show_default=False),
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="EPIMEM_DATA_DIR",
        help="data folder opened in process, without a server (server install; default ./data)",
        show_default=False,
    ),
]

# A file reader of the server install: (path, group) -> (group_id, session_id, messages) batches.
Batches = Iterable[tuple[str, str, list[Any]]]
Reader = Callable[[Path, str | None], Batches]


@dataclass(frozen=True)
class Local:
    """What the server install adds to the data commands: the data folder opened in process (the facade,
    ``api.facade.Epimem``), and readers of the files only it can parse, by file kind."""

    open: Callable[[typer.Context, Path | None], AbstractContextManager[Any]]
    readers: Mapping[str, Reader] = field(default_factory=dict)


LOCAL = "epimem.local"  # its key in the root context's ``obj``


def local_of(ctx: typer.Context) -> Local | None:
    found = ctx.find_root().obj
    local = found.get(LOCAL) if isinstance(found, dict) else None
    return local if isinstance(local, Local) else None


def uses_url(ctx: typer.Context, url: str | None, data_dir: Path | None) -> bool:
    """``--url`` unless a data folder is named on the command line while the URL comes from the environment;
    both on the command line is a mistake."""
    if url is None:
        return False
    if data_dir is None:
        return True
    named = {name for name in ("url", "data_dir") if _on_the_command_line(ctx, name)}
    if named == {"url", "data_dir"}:
        fail("give --url or --data-dir, not both")
    return named != {"data_dir"}


def _on_the_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether an option was given on the command line (not by its environment variable or its default). By
    the source's name: typer 0.29 brings its own copy of click's ``ParameterSource``."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Every epimem error, and bad input caught by validation on this side, as one line (exit status 1)."""
    try:
        yield
    except EpimemError as error:
        fail(error.message, 1, code=error.code)
    except ValueError as error:
        fail(one_line(error), 1, code="invalid_input")


@contextmanager
def open_memory(ctx: typer.Context, url: str | None, key: str | None, data_dir: Path | None) -> Iterator[Any]:
    """The client of ``url``, or the data folder in process, with ``one_line_errors``."""
    with one_line_errors():
        if uses_url(ctx, url, data_dir):
            assert url is not None
            with EpimemClient(url, api_key=key) as client:
                yield client
            return
        local = local_of(ctx)
        if local is None:
            fail(
                "give --url (or EPIMEM_URL) of a running epimem; working on a data folder without a server "
                f"needs the server install: {SERVER_INSTALL}"
            )
        with local.open(ctx, data_dir) as service:
            yield service


def reader_of(ctx: typer.Context, kind: str) -> Reader | None:
    local = local_of(ctx)
    return local.readers.get(kind) if local is not None else None
