"""The ``epimem`` console script. The command line belongs to the server (``epimem[server]``); a
client-only install gets one clear line instead of a traceback. ``epimem mcp`` also runs with only
``epimem[mcp]`` installed when it talks to a running epimem (``--url``)."""

from __future__ import annotations

import importlib.util
import sys

SERVER_MODULES = ("typer", "fastapi", "chromadb", "torch", "sentence_transformers")
HINT = "epimem: the command line is part of the server; install it with: pip install 'epimem[server]'"


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def _skip_slow_optional_imports() -> None:
    """jsonschema (imported by chromadb) imports rfc3987-syntax whenever it is installed (jupyterlab brings
    it), and that builds an RFC 3987 grammar at import: about 2 s on every command, for a URI format epimem
    never validates. Marking the module absent makes jsonschema skip that one format checker."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def main() -> None:
    _skip_slow_optional_imports()
    args = sys.argv[1:]
    missing = missing_server_modules()
    if args[:1] == ["mcp"] and missing:
        from api.mcp_server import main as mcp_main

        raise SystemExit(mcp_main(args[1:]))
    if missing:
        print(f"{HINT} (missing: {', '.join(missing)})", file=sys.stderr)
        raise SystemExit(1)
    from api.cli import app

    app()
