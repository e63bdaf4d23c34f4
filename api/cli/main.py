"""The ``epimem`` command line.

``serve`` starts the HTTP service. Every other command works in process on the data folder
(``--data-dir`` or ``EPIMEM_DATA_DIR``, or the Chroma server of ``EPIMEM_CHROMA_HOST``), the same
store a stopped server would use: run them while no server holds an embedded data folder.
Tables in a terminal, JSON with ``--json``.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
from rich.table import Table

from api.cli.backups import register as register_backups
from api.cli.common import (
    AsJson,
    DataDir,
    Session,
    Speakers,
    err,
    fail,
    open_service,
    out,
    print_json,
    progress,
    settings_for,
    short,
    speaker_filter,
)
from api.cli.corrections import register as register_corrections
from api.cli.erase import register as register_erase
from api.cli.files import note_when_empty
from api.cli.imports import register as register_import
from api.cli.keys import register as register_keys
from api.cli.mcp import register as register_mcp
from api.cli.operations import register as register_operations
from api.cli.segment import register as register_segment
from api.cli.startup import StartupError, banner, check_before_loading, check_keys, serve_announcing
from api.settings import Settings
from retrieval.types import ContextQuery, Direction, Order, SearchQuery

app = typer.Typer(
    name="epimem",
    help="Episodic memory for LLM applications: serve the API, import conversations, search, export.",
    no_args_is_help=True,
    add_completion=False,
)


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
def search(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group to search")],
    query: Annotated[str, typer.Argument(help="what to look for")],
    data_dir: DataDir = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, max=200, help="how many episodes")] = 5,
    session: Session = None,
    time: Annotated[str | None, typer.Option(help="a time window, e.g. 'last week'")] = None,
    speaker: Speakers = None,
    chronological: Annotated[bool, typer.Option("--chronological", help="in time order, not by relevance")] = False,
    as_json: AsJson = False,
) -> None:
    """Search a group's episodes by meaning and keyword."""
    with open_service(ctx, data_dir) as service:
        note_when_empty(service, group_id)
        request = SearchQuery(
            query=query,
            k=k,
            session_ids=[session] if session else None,
            time=time,
            order=Order.CHRONOLOGICAL if chronological else Order.RELEVANCE,
            filter=speaker_filter(speaker),
        )
        hits = service.search(group_id, request)
    if as_json:
        print_json([hit.model_dump(mode="json") for hit in hits])
        return
    table = Table(title=f"{len(hits)} episodes for {query!r}")
    for column in ("score", "when", "session", "title", "content"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        episode = hit.episode
        table.add_row(
            f"{hit.score:.3f}",
            episode.timestamp.strftime("%Y-%m-%d %H:%M"),
            episode.session_id,
            episode.title,
            short(episode.content),
        )
    out.print(table)


@app.command()
def timeline(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    data_dir: DataDir = None,
    session: Session = None,
    start: Annotated[str | None, typer.Option(help="from (ISO 8601)")] = None,
    end: Annotated[str | None, typer.Option(help="until (ISO 8601)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
    desc: Annotated[bool, typer.Option("--desc", help="newest first")] = False,
    speaker: Speakers = None,
    as_json: AsJson = False,
) -> None:
    """Episodes of a group (or session) in time order, one page."""
    with open_service(ctx, data_dir) as service:
        note_when_empty(service, group_id)
        page = service.timeline(
            group_id,
            session_id=session,
            start=start,
            end=end,
            limit=limit,
            cursor=cursor,
            order=Direction.DESC if desc else Direction.ASC,
            filter=speaker_filter(speaker),
        )
    if as_json:
        print_json(page)
        return
    table = Table(title=f"timeline of {group_id}")
    for column in ("when", "session", "title", "messages"):
        table.add_column(column, overflow="fold")
    for episode in page.episodes:
        table.add_row(
            episode.timestamp.strftime("%Y-%m-%d %H:%M"), episode.session_id, episode.title, str(episode.message_count)
        )
    out.print(table)
    if page.next_cursor:
        out.print(f"more: --cursor {page.next_cursor}")


@app.command()
def context(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    query: Annotated[str, typer.Argument(help="the question the context is for")],
    data_dir: DataDir = None,
    budget: Annotated[int, typer.Option(min=16, max=100_000, help="token budget")] = 1000,
    session: Session = None,
    time: Annotated[str | None, typer.Option(help="a time window, e.g. 'last week'")] = None,
    speaker: Speakers = None,
    as_json: AsJson = False,
) -> None:
    """A cited, token-budgeted context block for a prompt."""
    with open_service(ctx, data_dir) as service:
        note_when_empty(service, group_id)
        sessions = [session] if session else None
        request = ContextQuery(
            query=query, token_budget=budget, session_ids=sessions, time=time, filter=speaker_filter(speaker)
        )
        result = service.context(group_id, request)
    if as_json:
        print_json(result)
        return
    sys.stdout.write(result.text + "\n")
    # The block's sources (which messages of which episode each dated piece comes from), after the block: stderr,
    # so that stdout stays the text to paste.
    err.print(f"{result.tokens} tokens, {len(result.citations)} citations" + (":" if result.citations else ""))
    for number, citation in enumerate(result.citations, start=1):
        err.print(
            f"  [{number}] {citation.timestamp:%Y-%m-%d %H:%M} {citation.session_id}: "
            f"messages {', '.join(citation.message_ids)} (episode {citation.episode_id})",
            soft_wrap=True,
            highlight=False,
        )


@app.command()
def export(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    data_dir: DataDir = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file (default: standard output)")] = None,
    include_embeddings: Annotated[bool, typer.Option("--include-embeddings", help="also write the vectors")] = False,
) -> None:
    """Write a group as JSON Lines (import it again with `epimem import`)."""
    with open_service(ctx, data_dir) as service:
        lines = service.export_group(group_id, include_embeddings=include_embeddings)
        if output is None:
            for line in lines:
                sys.stdout.write(line)
        else:
            with output.open("w", encoding="utf-8") as handle:
                count = 0
                for line in lines:
                    handle.write(line)
                    count += 1
            err.print(f"wrote {count} lines to {output}")


@app.command()
def stats(ctx: typer.Context, data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Groups, sessions and vectors in the store."""
    with open_service(ctx, data_dir) as service:
        rows = [
            {
                "group_id": group_id,
                "sessions": len(service.list_sessions(group_id)),
                "vectors": service.vector_count(group_id),
            }
            for group_id in service.list_groups()
        ]
        summary = {"model": service.embedder.model_id, "groups": rows}
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"epimem store (model {summary['model']})")
    for column in ("group", "sessions", "vectors"):
        table.add_column(column)
    for row in rows:
        table.add_row(str(row["group_id"]), str(row["sessions"]), str(row["vectors"]))
    out.print(table)


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


for _register in (register_import, register_mcp, register_erase, register_segment, register_corrections, register_keys):
    _register(app)
register_backups(app)
register_operations(app)
