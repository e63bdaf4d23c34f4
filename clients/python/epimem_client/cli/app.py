"""The ``epimem`` command line as the thin client ships it: the commands that read or write a group, on a
running epimem (``--url``). The server install's ``epimem`` (``api.cli.main``) is this same app with the
data folder in process and its own commands (``serve``, ``mcp``, ``reembed``, ...) added; here those say
that they need it.
"""

from __future__ import annotations

from typing import Any

import typer
import typer.core

from epimem_client.cli import corrections, groups, operations, recall
from epimem_client.cli.output import fail
from epimem_client.cli.target import SERVER_INSTALL

HELP = "Episodic memory for LLM applications: serve the API, import conversations, search, export."
# The commands of the server install (api.cli.main), each with what it is for.
SERVER_COMMANDS = {
    "serve": "Start the HTTP API (server install).",
    "mcp": "Serve epimem's memory tools to an MCP client over stdio (server install).",
    "reembed": "Rebuild vectors with the configured embedding model (server install).",
    "segment": "Show where episodes would end in a file of messages (server install).",
    "erase-residue": "Erase deleted data left in a stopped Chroma folder (server install).",
}


def _flag_type(option: typer.core.TyperOption, ctx: Any) -> str | None:
    """Flags (``--json``, ``--help``) take no value: show none (typer 0.29 with click 8.5 shows ``<bool>``)."""
    return None if option.is_flag and not option.count else _option_type(option, ctx)


_option_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign,assignment]


def _usage_name(argument: typer.core.TyperArgument) -> str:
    """``GROUP_ID`` for a required argument, ``[GROUP_ID]`` for an optional one, as click and every man page
    write them (typer 0.29 writes ``{group_id}``)."""
    name = argument.metavar or (argument.name or "").upper()
    name = name if argument.required else f"[{name}]"
    return name + "..." if argument.nargs != 1 else name


if hasattr(typer.core.TyperArgument, "_usage_display_name"):
    typer.core.TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign,assignment]


def new_app() -> typer.Typer:
    """An ``epimem`` app with every command that reads or writes a group."""
    app = typer.Typer(name="epimem", help=HELP, no_args_is_help=True, add_completion=False)
    for module in (recall, groups, corrections, operations):
        module.register(app)
    return app


def _needs_the_server(name: str, help_text: str) -> None:
    def command(ctx: typer.Context) -> None:
        fail(f"`epimem {name}` runs epimem itself: it needs the server install: {SERVER_INSTALL}")

    command.__doc__ = help_text
    command.__name__ = name.replace("-", "_")
    settings = {"ignore_unknown_options": True, "allow_extra_args": True}
    app.command(name, context_settings=settings, add_help_option=False)(command)


app = new_app()
for _name, _help in SERVER_COMMANDS.items():
    _needs_the_server(_name, _help)


def main() -> None:
    """The thin client's ``epimem`` console script."""
    app()
