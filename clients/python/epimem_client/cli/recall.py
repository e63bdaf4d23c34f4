"""``epimem search``, ``context`` and ``timeline``: recall from a group, as tables (JSON with ``--json``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from epimem_client.cli import output
from epimem_client.cli.output import err, fail, out, print_json, short
from epimem_client.cli.target import DataDir, Key, Url, open_memory

AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
Session = Annotated[str | None, typer.Option("--session", "-s", help="only this session")]
Speakers = Annotated[
    list[str] | None, typer.Option("--speaker", help="only what this speaker said (id or a known name; repeatable)")
]
TimeWords = Annotated[str | None, typer.Option(help="a time window, e.g. 'last week'")]
# Far past year 9999 as seconds: a number this large was written in milliseconds.
LATEST_SECONDS = 253_402_300_799


def speaker_filter(speakers: list[str] | None) -> dict[str, Any] | None:
    return {"speakers": speakers} if speakers else None


def moment(option: str, value: str | None) -> str | None:
    """A ``--start`` / ``--end`` value as the API reads it: ISO 8601 (or any date the server reads) as given; a
    number as seconds since 1970, written out in ISO 8601 (a number in milliseconds is refused, said once)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    if not 0 <= number <= LATEST_SECONDS:
        fail(
            f"{option} {value}: a number is seconds since 1970, and this one is out of range "
            "(milliseconds? divide by 1000), or give a date such as 2023-05-08T13:56:00Z"
        )
    return datetime.fromtimestamp(number, UTC).isoformat()


def note_when_empty(memory: Any, group_id: str) -> None:
    """A query of a group that holds nothing answers empty, as over HTTP; the note on stderr says why (a typo
    in the group's name, most of the time)."""
    if not memory.group_exists(group_id):
        err.print(f"note: group {group_id!r} holds nothing (`epimem stats` lists the groups)", style="yellow")


def search(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group to search")],
    query: Annotated[str, typer.Argument(help="what to look for")],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, max=200, help="how many episodes")] = 5,
    min_score: Annotated[
        float, typer.Option("--min-score", min=0.0, max=1.0, help="only hits scoring at least this (0..1)")
    ] = 0.0,
    session: Session = None,
    time: TimeWords = None,
    speaker: Speakers = None,
    chronological: Annotated[bool, typer.Option("--chronological", help="in time order, not by relevance")] = False,
    as_json: AsJson = False,
) -> None:
    """Search a group's episodes by meaning and keyword (what was just said included, marked pending)."""
    with open_memory(ctx, url, key, data_dir) as memory:
        hits = memory.search(
            group_id,
            query,
            k=k,
            min_score=min_score,
            session_ids=[session] if session else None,
            time=time,
            order="chronological" if chronological else "relevance",
            filter=speaker_filter(speaker),
        )
        if not hits:
            note_when_empty(memory, group_id)
    if as_json:
        print_json([hit.model_dump(mode="json") for hit in hits])
        return
    table = Table(title=f"{len(hits)} episodes for {query!r}")
    for column in ("score", "when", "session", "title", "content"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        episode = hit.episode
        title = ("(pending) " if hit.pending else "") + episode.title
        when = episode.timestamp.strftime("%Y-%m-%d %H:%M")
        table.add_row(f"{hit.score:.3f}", when, episode.session_id, title, short(episode.content))
    out.print(table)


def timeline(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    session: Session = None,
    start: Annotated[str | None, typer.Option(help="from (ISO 8601, or seconds since 1970)")] = None,
    end: Annotated[str | None, typer.Option(help="until (ISO 8601, or seconds since 1970)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
    desc: Annotated[bool, typer.Option("--desc", help="newest first")] = False,
    speaker: Speakers = None,
    as_json: AsJson = False,
) -> None:
    """Episodes of a group (or session) in time order, one page; a session's messages not in an episode
    yet show as its open episode, marked pending."""
    window = {"start": moment("--start", start), "end": moment("--end", end)}
    with open_memory(ctx, url, key, data_dir) as memory:
        page = memory.timeline(
            group_id,
            session_id=session,
            limit=limit,
            cursor=cursor,
            order="desc" if desc else "asc",
            filter=speaker_filter(speaker),
            **{name: value for name, value in window.items() if value is not None},
        )
        if not page.episodes and cursor is None:
            note_when_empty(memory, group_id)
    pending = set(page.pending)
    rows = [
        (f"{e.timestamp:%Y-%m-%d %H:%M}", e.session_id, "(pending) " * (e.uuid in pending) + e.title, e.message_count)
        for e in page.episodes
    ]
    columns = ("when", "session", "title", "messages")
    output.answer(page, as_json, lambda _: output.table(f"timeline of {group_id}", columns, rows))
    if not as_json:
        output.more(page.next_cursor)


def context(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="group")],
    query: Annotated[str, typer.Argument(help="the question the context is for")],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    budget: Annotated[int, typer.Option(min=16, max=100_000, help="token budget")] = 1000,
    session: Session = None,
    time: TimeWords = None,
    speaker: Speakers = None,
    as_json: AsJson = False,
) -> None:
    """A cited, token-budgeted context block for a prompt."""
    with open_memory(ctx, url, key, data_dir) as memory:
        result = memory.context(
            group_id,
            query,
            token_budget=budget,
            session_ids=[session] if session else None,
            time=time,
            filter=speaker_filter(speaker),
        )
        if not result.citations:
            note_when_empty(memory, group_id)
    if as_json:
        print_json(result)
        return
    sys.stdout.write(result.text + "\n")
    # The block's sources (which messages of which episode each marked piece comes from), after the block: stderr,
    # so that stdout stays the text to paste.
    err.print(f"{result.tokens} tokens, {len(result.citations)} citations" + (":" if result.citations else ""))
    for citation in result.citations:
        err.print(
            f"  {citation.marker} {citation.timestamp:%Y-%m-%d %H:%M} {citation.session_id}: "
            f"messages {', '.join(citation.message_ids)} (episode {citation.episode_id})"
            + (" (pending)" if citation.pending else "")
            + "".join(f"; excerpt of {e.message_id}: characters {e.start}-{e.end}" for e in citation.excerpts),
            soft_wrap=True,
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    for command in (search, context, timeline):
        app.command()(command)
