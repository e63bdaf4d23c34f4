"""Each operation is declared once (``api.catalog``) and every surface offers what the table says, no more and
no less: the app's HTTP routes, the MCP tools, the facade's and both Python clients' methods, the TypeScript
client's methods (read from its source), the commands."""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

import pytest
from helpers.paths import ROOT
from typer.main import get_command

from api.catalog import NOT_OPERATIONS, OPERATIONS
from api.cli.main import app as cli_app
from api.facade import Epimem
from api.mcp.server import build_server
from api.server import create_app
from api.settings import load_settings
from epimem_client import AsyncEpimemClient, EpimemClient
from epimem_client.keys import KeyAdmin


def public_methods(cls: type) -> set[str]:
    return {name for name, value in inspect.getmembers(cls) if not name.startswith("_") and callable(value)}


def declared(surface: str) -> set[str]:
    return {name for op in OPERATIONS if (name := getattr(op, surface)) is not None}


def test_operation_names_are_unique() -> None:
    names = [op.name for op in OPERATIONS]
    assert len(names) == len(set(names))


def test_every_http_route_is_an_operation_and_every_declared_route_exists() -> None:
    schema = create_app(settings=load_settings(api_keys_file=None)).openapi()
    routes = {f"{method.upper()} {path}" for path, methods in schema["paths"].items() for method in methods}
    assert routes == {route for op in OPERATIONS for route in op.http}


def test_every_mcp_tool_is_an_operation() -> None:
    tools = asyncio.run(build_server(lambda: None, default_group="g").list_tools())  # type: ignore[arg-type, return-value]
    assert {tool.name for tool in tools} == declared("mcp")


def test_the_facade_offers_the_declared_operations() -> None:
    assert public_methods(Epimem) - NOT_OPERATIONS["facade"] == declared("facade")


@pytest.mark.parametrize("client", [EpimemClient, AsyncEpimemClient])
def test_both_python_clients_offer_the_declared_operations(client: type) -> None:
    names = {name for name in declared("python") if not name.startswith("KeyAdmin.")}
    assert public_methods(client) - NOT_OPERATIONS["python"] == names


def test_the_key_admin_offers_the_declared_key_operations() -> None:
    keys = {name.removeprefix("KeyAdmin.") for name in declared("python") if name.startswith("KeyAdmin.")}
    assert public_methods(KeyAdmin) == keys


def test_the_typescript_client_offers_the_declared_operations() -> None:
    source = (ROOT / "clients" / "typescript" / "src" / "client.ts").read_text(encoding="utf-8")
    methods = set(re.findall(r"^  async \*?([A-Za-z]\w*)\(", source, flags=re.MULTILINE))
    assert methods == declared("typescript")


def commands(group: Any, prefix: str = "") -> set[str]:
    """The command tree's leaves, each with its groups' names ("keys create")."""
    found: set[str] = set()
    for name, command in group.commands.items():
        if getattr(command, "commands", None):  # a group of commands
            found |= commands(command, f"{prefix}{name} ")
        else:
            found.add(prefix + name)
    return found


def test_every_command_is_an_operation() -> None:
    root: Any = get_command(cli_app)
    assert commands(root) == declared("cli")
