"""The ``epimem`` command line.

``serve`` starts the HTTP service. Every other command works in process on the data folder
(``--data-dir`` or ``EPIMEM_DATA_DIR``, or the Chroma server of ``EPIMEM_CHROMA_HOST``), the same
store a stopped server would use: run them while no server holds an embedded data folder.
Tables in a terminal, JSON with ``--json``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import typer.core
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from api.cli_files import check_messages_file, file_kind, require_group
from api.facade import Epimem
from api.startup import AnnouncingServer, StartupError, banner, check_before_loading, check_data_dir, check_keys
from memory.errors import EpimemError
from memory.importers import read_jsonl, read_locomo
from memory.lazy_embedding import LazyEmbedder
from memory.settings import Settings
from retrieval.types import ContextQuery, Direction, Order, SearchQuery

app = typer.Typer(
    name="epimem",
    help="Episodic memory for LLM applications: serve the API, import conversations, search, export.",
    no_args_is_help=True,
    add_completion=False,
)
out = Console()
err = Console(stderr=True)


def _flag_type(option: typer.core.TyperOption, ctx: Any) -> str | None:
    """Flags (``--json``, ``--help``) take no value: show none (typer 0.29 with click 8.5 shows ``<bool>``)."""
    return None if option.is_flag and not option.count else _option_type(option, ctx)


_option_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign,assignment]

LOOPBACK = {"127.0.0.1", "localhost", "::1"}

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="EPIMEM_DATA_DIR", help="data folder (default ./data)", show_default=False),
]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
Session = Annotated[str | None, typer.Option("--session", "-s", help="only this session")]


def _settings(data_dir: Path | None) -> Settings:
    return Settings(data_dir=data_dir) if data_dir is not None else Settings()


@contextmanager
def _service(ctx: typer.Context, data_dir: Path | None) -> Iterator[Epimem]:
    # ctx.obj may carry an already loaded embedder (tests, or a host program invoking the CLI).
    embedder = (ctx.obj or {}).get("embedder") if isinstance(ctx.obj, dict) else None
    settings = _settings(data_dir)
    try:
        if settings.chroma_host is None:
            check_data_dir(settings.data_dir)
        service = Epimem.from_settings(settings, background=False, embedder=embedder)
        if isinstance(service.embedder, LazyEmbedder):  # say what the wait is for, if the command needs the model
            service.embedder.announce = lambda: err.print("loading the embedding model…", style="dim")
    except StartupError as error:
        _fail(str(error), 1)
    except EpimemError as error:  # e.g. the folder is held by a running server
        _fail(f"({error.code}) {error.message}", 1)
    try:
        yield service
    except EpimemError as error:
        err.print(f"[red]error[/red] ({error.code}): {escape(error.message)}", soft_wrap=True)
        raise typer.Exit(1) from None
    except ValueError as error:  # bad input caught by validation (ids, query fields)
        err.print(f"[red]error[/red] (invalid_input): {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        service.close()


def _print_json(value: Any) -> None:
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2)
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=_json_default)
    sys.stdout.write(text + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
    data_dir: DataDir = None,
    workers: Annotated[int, typer.Option(min=1, help="worker processes (more than 1 needs a Chroma server)")] = 1,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
) -> None:
    """Start the HTTP API (OpenAPI docs at /docs). Blocks until stopped: use another terminal."""
    settings = _settings(data_dir)
    try:
        keys = check_keys(settings)
    except StartupError as error:
        _fail(str(error))
    if not keys.enabled:
        if host not in LOOPBACK:
            _fail(
                f"refusing to bind to {host}: no API keys are configured (local mode). "
                "Set EPIMEM_API_KEYS_FILE to serve beyond this machine."
            )
        err.print(f"local mode: no API keys configured, listening on {host} only (this machine)")
    if workers > 1 and settings.chroma_host is None:
        _fail("--workers > 1 needs a Chroma server (EPIMEM_CHROMA_HOST): embedded Chroma is one process")
    try:
        _, sock = check_before_loading(settings, host=host, port=port)
    except StartupError as error:
        _fail(str(error))
    _run_server(settings, sock, host=host, port=port, workers=workers, log_level=log_level)


def _fail(message: str, status: int = 2) -> NoReturn:
    """One plain line on stderr and a non-zero exit: no traceback for a mistake the user can fix."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(status)


def _run_server(settings: Settings, sock: socket.socket, *, host: str, port: int, workers: int, log_level: str) -> None:
    import uvicorn

    from api.app import create_app
    from api.logs import configure_logging

    configure_logging(log_level.upper())
    announce = banner(host, port, str(settings.chroma_host or settings.data_dir))
    if workers == 1:
        config = uvicorn.Config(create_app(settings=settings), log_config=None, access_log=False, fd=sock.fileno())
        AnnouncingServer(config, announce).run(sockets=[sock])
        return
    # Worker processes build their own app from the environment.
    os.environ["EPIMEM_DATA_DIR"] = str(settings.data_dir)
    announce()
    uvicorn.run("api.app:serve_app", factory=True, fd=sock.fileno(), workers=workers, log_config=None, access_log=False)


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


@app.command("import")
def import_(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="LoCoMo JSON, messages JSONL or an export")],
    data_dir: DataDir = None,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="import into this group (LoCoMo: only one sample)")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Import conversations: a LoCoMo file (one group per sample), JSON Lines of messages (each with
    group_id and session_id), or a group export. Idempotent: a re-run adds nothing."""
    kind = file_kind(path)
    totals: dict[str, Any] = {"kind": kind, "groups": set(), "sessions": 0, "messages": 0, "episodes": 0}
    with _service(ctx, data_dir) as service:
        if kind == "export":
            with path.open(encoding="utf-8") as lines:
                receipt = service.import_group(lines, group_id=group)
            totals.update(groups={receipt.group_id}, sessions=receipt.sessions, messages=receipt.messages)
            totals.update(episodes=receipt.episodes)
        elif kind == "locomo":
            samples = read_locomo(path)
            if group is not None and len(samples) != 1:
                raise EpimemError(f"--group needs a file with one sample; this one has {len(samples)}")
            with _progress() as progress:
                task = progress.add_task("samples", total=len(samples))
                for sample in samples:
                    episodes = service.ingest_locomo(sample, group_id=group)
                    totals["groups"].add(group or sample.sample_id)
                    totals["sessions"] += len(sample.sessions)
                    totals["messages"] += len(sample.messages)
                    totals["episodes"] += len(episodes)
                    progress.advance(task)
        else:
            check_messages_file(path)
            batches = list(read_jsonl(path))
            with _progress() as progress:
                task = progress.add_task("sessions", total=len(batches))
                for group_id, session_id, messages in batches:
                    target = group or group_id
                    service.add_messages(target, session_id, messages)
                    episodes = service.flush(target, session_id)
                    totals["groups"].add(target)
                    totals["sessions"] += 1
                    totals["messages"] += len(messages)
                    totals["episodes"] += len(episodes)
                    progress.advance(task)
    totals["groups"] = sorted(totals["groups"])
    if as_json:
        _print_json(totals)
        return
    table = Table(title=f"imported {path.name}")
    for column in ("kind", "groups", "sessions", "messages", "new episodes"):
        table.add_column(column)
    table.add_row(
        kind,
        ", ".join(totals["groups"]),
        str(totals["sessions"]),
        str(totals["messages"]),
        str(totals["episodes"]),
    )
    out.print(table)


@app.command()
def search(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group to search")],
    query: Annotated[str, typer.Argument(help="what to look for")],
    data_dir: DataDir = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, max=200, help="how many episodes")] = 5,
    session: Session = None,
    time: Annotated[str | None, typer.Option(help="a time window, e.g. 'last week'")] = None,
    chronological: Annotated[bool, typer.Option("--chronological", help="in time order, not by relevance")] = False,
    as_json: AsJson = False,
) -> None:
    """Search a group's episodes by meaning and keyword."""
    with _service(ctx, data_dir) as service:
        require_group(service, group_id)
        request = SearchQuery(
            query=query,
            k=k,
            session_ids=[session] if session else None,
            time=time,
            order=Order.CHRONOLOGICAL if chronological else Order.RELEVANCE,
        )
        hits = service.search(group_id, request)
    if as_json:
        _print_json([hit.model_dump(mode="json") for hit in hits])
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
            _short(episode.content),
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
    as_json: AsJson = False,
) -> None:
    """Episodes of a group (or session) in time order, one page."""
    with _service(ctx, data_dir) as service:
        require_group(service, group_id)
        page = service.timeline(
            group_id,
            session_id=session,
            start=start,
            end=end,
            limit=limit,
            cursor=cursor,
            order=Direction.DESC if desc else Direction.ASC,
        )
    if as_json:
        _print_json(page)
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
    as_json: AsJson = False,
) -> None:
    """A cited, token-budgeted context block for a prompt."""
    with _service(ctx, data_dir) as service:
        require_group(service, group_id)
        request = ContextQuery(query=query, token_budget=budget, session_ids=[session] if session else None, time=time)
        result = service.context(group_id, request)
    if as_json:
        _print_json(result)
        return
    sys.stdout.write(result.text + "\n")
    err.print(f"{result.tokens} tokens, {len(result.citations)} citations")


@app.command()
def export(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    data_dir: DataDir = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="file (default: standard output)")] = None,
    include_embeddings: Annotated[bool, typer.Option("--include-embeddings", help="also write the vectors")] = False,
) -> None:
    """Write a group as JSON Lines (import it again with `epimem import`)."""
    with _service(ctx, data_dir) as service:
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
    with _service(ctx, data_dir) as service:
        rows = [
            {
                "group_id": group_id,
                "sessions": len(service.list_sessions(group_id)),
                "vectors": service.store.count_vectors(group_id),
            }
            for group_id in service.store.list_groups()
        ]
        summary = {"model": service.embedder.model_id, "groups": rows}
    if as_json:
        _print_json(summary)
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
    with _service(ctx, data_dir) as service, _progress() as progress:
        task = progress.add_task("vectors", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = service.reembed(group, progress=advance)
    summary = {"model": report.model_id, "groups": report.groups, "vectors": report.vectors}
    summary["skipped_collections"] = len(report.skipped)
    if as_json:
        _print_json(summary)
    else:
        out.print(
            f"re-embedded {report.vectors} vectors in {len(report.groups)} groups with {report.model_id} "
            f"({len(report.skipped)} collections already current)"
        )


from api.cli_mcp import register as _register_mcp  # noqa: E402

_register_mcp(app)

from api.cli_erase import register as _register_erase  # noqa: E402

_register_erase(app)

from api.cli_segment import register as _register_segment  # noqa: E402

_register_segment(app)


if __name__ == "__main__":
    app()
