"""The ``epimem`` command line of the server install.

The commands that read or write a group (``search``, ``context``, ``timeline``, ``import``, ``export``,
``stats``, the corrections, ``retention``, ``webhooks``) are the thin client's (``epimem_client.cli``): on a
running epimem with ``--url`` (or ``EPIMEM_URL``), through ``EpimemClient``, or here also in process on a data
folder (``--data-dir`` or ``EPIMEM_DATA_DIR``, or the Chroma server of ``EPIMEM_CHROMA_HOST``), the store a
stopped server would use.
This module adds that data folder and the commands that run epimem itself: ``serve``, ``reembed``, ``mcp``,
``segment``, ``erase-residue``. Tables in a terminal, JSON with ``--json``.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.backups import register as register_backups
from api.cli.common import AsJson, DataDir, fail, local, open_service, out, print_json, progress, settings_for
from api.cli.erase import register as register_erase
from api.cli.keys import register as register_keys
from api.cli.mcp import register as register_mcp
from api.cli.segment import register as register_segment
from epimem_client.cli.app import new_app
from epimem_client.cli.output import err
from epimem_client.cli.target import LOCAL

if TYPE_CHECKING:
    from api.settings import Settings

app = new_app()


@app.callback()
def _server_install(ctx: typer.Context) -> None:
    """The data folder in process for the data commands, when they are given no URL."""
    ctx.ensure_object(dict)[LOCAL] = local()


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
    data_dir: DataDir = None,
    workers: Annotated[int, typer.Option(min=1, help="worker processes (more than 1 needs a Chroma server)")] = 1,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
) -> None:
    """Start the HTTP API (OpenAPI docs at /docs). Blocks until stopped: use another terminal."""
    from api.cli.startup import StartupError, check_before_loading, check_keys

    settings = settings_for(data_dir)
    try:
        keys = check_keys(settings)
    except StartupError as error:
        fail(str(error))
    if not keys.enabled and host not in LOOPBACK:
        fail(
            f"refusing to bind to {host}: no API keys are configured (local mode). "
            "Set EPIMEM_API_KEYS_FILE (or EPIMEM_API_KEYS_STORE=true) to serve beyond this machine."
        )
    if workers > 1 and settings.chroma_host is None:
        fail("--workers > 1 needs a Chroma server (EPIMEM_CHROMA_HOST): embedded Chroma is one process")
    try:
        _, sock = check_before_loading(settings, host=host, port=port)
    except StartupError as error:
        fail(str(error))
    if not keys.enabled:  # said once the port is ours: a start that fails says only why
        err.print(f"local mode: no API keys configured, serving {host} only (this machine)")
    _run_server(settings, sock, host=host, port=port, workers=workers, log_level=log_level)


def _run_server(settings: Settings, sock: socket.socket, *, host: str, port: int, workers: int, log_level: str) -> None:
    import uvicorn

    from api.cli.startup import banner, serve_announcing
    from api.logs import configure_logging
    from api.server import create_app

    configure_logging(log_level.upper())
    announce = banner(host, port, str(settings.chroma_host or settings.data_dir))
    if workers == 1:
        config = uvicorn.Config(create_app(settings=settings), log_config=None, access_log=False, fd=sock.fileno())
        serve_announcing(config, sock, announce)
        return
    # Worker processes build their own app from the environment.
    os.environ["EPIMEM_DATA_DIR"] = str(settings.data_dir)
    announce()
    uvicorn.run(
        "api.server:serve_app", factory=True, fd=sock.fileno(), workers=workers, log_config=None, access_log=False
    )


@app.command()
def reembed(
    ctx: typer.Context,
    data_dir: DataDir = None,
    group: Annotated[str | None, typer.Option("--group", "-g", help="only this group")] = None,
    as_json: AsJson = False,
) -> None:
    """Rebuild vectors with the configured embedding model (after changing it). Repeatable."""
    with open_service(ctx, data_dir) as service, progress() as bar:
        task = bar.add_task("vectors", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = service.reembed(group, progress=advance)
    summary = {"model": report.model_id, "groups": report.groups, "vectors": report.vectors}
    summary["skipped_collections"] = len(report.skipped)
    if as_json:
        print_json(summary)
    else:
        out.print(
            f"re-embedded {report.vectors} vectors in {len(report.groups)} groups with {report.model_id} "
            f"({len(report.skipped)} collections already current)"
        )


for _register in (register_mcp, register_erase, register_segment, register_keys):
    _register(app)
register_backups(app)
