"""The ``epimem`` console script of the server install (``api.cli.main``). An environment without the server's
packages runs the thin client's command line instead (``epimem_client.cli``: every data command on a running
epimem, ``--url``; the server's own commands say that they need it); ``epimem mcp`` also runs without them
when it talks to a running epimem (``--url``)."""

from __future__ import annotations

import importlib.util
import sys

SERVER_MODULES = ("fastapi", "chromadb", "torch", "sentence_transformers")


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
        from epimem_client.cli.app import main as thin_main

        thin_main()
        return
    from api.cli.main import app

    app()
