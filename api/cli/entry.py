"""The ``epimem`` console script. The command line belongs to the server (``epimem-server``); an environment
without the server's packages gets one clear line instead of a traceback. ``epimem mcp`` also runs without
them when it talks to a running epimem (``--url``)."""

from __future__ import annotations

import importlib.util
import sys

SERVER_MODULES = ("typer", "fastapi", "chromadb", "torch", "sentence_transformers")
HINT = (
    "epimem: the command line is part of the server; install it with: pip install epimem-server "
    "(from a clone: pip install -e .)"
)


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


# jsonschema (imported by chromadb) imports these whenever they are installed (jupyterlab brings them), for
# format checkers epimem never uses: rfc3987-syntax builds an RFC 3987 grammar at import (about 2 s on every
# command), the others (arrow among them) cost ~60 ms more. Each is used by nothing else epimem runs.
OPTIONAL_FORMAT_MODULES = (
    "rfc3987_syntax",
    "rfc3986_validator",
    "rfc3339_validator",
    "isoduration",
    "uri_template",
    "webcolors",
    "fqdn",
)


def _skip_slow_optional_imports() -> None:
    """Mark jsonschema's optional format modules absent: jsonschema then skips those format checkers."""
    for name in OPTIONAL_FORMAT_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def main() -> None:
    _skip_slow_optional_imports()
    args = sys.argv[1:]
    missing = missing_server_modules()
    if args[:1] == ["mcp"] and missing:
        from api.mcp.server import main as mcp_main

        raise SystemExit(mcp_main(args[1:]))
    if missing:
        print(f"{HINT} (missing: {', '.join(missing)})", file=sys.stderr)
        raise SystemExit(1)
    from api.cli.main import app

    app()
