"""``epimem mcp``: the MCP server over stdio (see ``api.mcp.server``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def mcp(
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", envvar="EPIMEM_DATA_DIR", help="data folder of the in-process service")
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="a running epimem instead of a data folder")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="EPIMEM_API_KEY", help="API key for --url")] = None,
    group: Annotated[str | None, typer.Option("--group", "-g", help="default group when a tool names none")] = None,
) -> None:
    """Serve epimem's memory tools to an MCP client (desktop or IDE agent) over stdio."""
    from api.mcp.server import main

    argv = [f"--{name}={value}" for name, value in (("data-dir", data_dir), ("url", url), ("group", group)) if value]
    if api_key:
        argv.append(f"--api-key={api_key}")
    raise typer.Exit(main(argv))


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
