"""epimem as an MCP server (the official ``mcp`` SDK, 2.x): the same eight tools over stdio
(``epimem mcp``) and over streamable HTTP (mounted at ``/mcp`` by ``api.mcp.http``).

The tools call a *backend* with the facade's method names: the in-process ``Epimem`` (a data
folder) or an ``EpimemClient`` (a running epimem, ``--url``). A ``guard`` sees every call with the
group it touches and the role it needs; over HTTP it applies the same API keys as every route.

    epimem mcp --data-dir ./data --group team-a            # in process
    epimem mcp --url http://127.0.0.1:8000 --api-key KEY   # a running epimem
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any, Protocol, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from api.limits import BatchLimits, check_batch
from api.mcp.shapes import (
    ChatMessage,
    FilterArg,
    GroupArg,
    Hit,
    RefTimeArg,
    SessionArg,
    SessionsArg,
    TimeArg,
    Timestamp,
    hit_of,
    problems,
    scope_of,
)
from memory.errors import EpimemError
from memory.models import Episode, Message

# The same role for the same act as over HTTP: reads, writes, and admin for every delete.
READ, WRITE, ADMIN = "read", "write", "admin"
# (context, group id, role) -> raises ToolError, or returns who signs the call's changes (None: the backend's own)
Guard = Callable[[Context, str, str], str | None]
log = logging.getLogger("epimem.mcp")
MAX_ERROR_CHARS = 500


class Backend(Protocol):
    """The facade's methods the tools use (``Epimem`` and ``EpimemClient`` both have them)."""

    def add_messages(self, group_id: str, session_id: str, messages: Any, *, actor: str = ...) -> Any: ...
    def flush(self, group_id: str, session_id: str, *, actor: str = ...) -> list[Episode]: ...
    def search(self, group_id: str, query: str, **options: Any) -> Any: ...
    def context(self, group_id: str, query: str, **options: Any) -> Any: ...
    def timeline(self, group_id: str, **params: Any) -> Any: ...
    def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode: ...
    def get_message(self, group_id: str, session_id: str, message_id: str) -> Message: ...
    def episode_messages(self, group_id: str, episode: Episode) -> list[Message]: ...
    def list_sessions(self, group_id: str) -> Any: ...
    def delete_session(self, group_id: str, session_id: str, *, actor: str = ...) -> Any: ...

    def correct_episode(
        self,
        group_id: str,
        session_id: str,
        episode_id: str,
        *,
        title: str | None = ...,
        content: str | None = ...,
        reason: str | None = ...,
    ) -> Any: ...


def signed_by(actor: str | None) -> dict[str, str]:
    """The ``actor`` argument of a backend call that changes memory (none: the backend signs it itself)."""
    return {"actor": actor} if actor is not None else {}


def bounded(text: str) -> str:
    """A refusal's text cut to ``MAX_ERROR_CHARS``: it may name a value the caller sent (an id), never at length."""
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class EpimemMCPServer(MCPServer):
    """``MCPServer`` whose refusals say in one sentence what is wrong: the SDK's argument errors
    would quote pydantic's whole report (with the values); each refusal is one line in the log."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                error = ToolError(f"invalid_input: {problems(cause)}")
            elif not isinstance(cause, ToolError) or not str(cause):
                raise
            else:
                error = ToolError(str(cause))
            log.warning("tool %s refused: %s", name, str(error).split(":", 1)[0][:100])  # the code, no input
            raise ToolError(bounded(str(error))) from None


class Tools:
    """The tool bodies: resolve the group, check it, run the backend call off the event loop."""

    def __init__(
        self,
        backend: Callable[[], Backend],
        default_group: str | None,
        guard: Guard | None,
        limits: BatchLimits | None = None,
    ) -> None:
        self.backend = backend
        self.default_group = default_group
        self.guard = guard
        self.limits = limits

    async def run(self, ctx: Context, group: str | None, role: str, call: Callable[[Backend, str], Any]) -> Any:
        return await self.signed(ctx, group, role, lambda backend, group_id, _actor: call(backend, group_id))

    async def signed(
        self, ctx: Context, group: str | None, role: str, call: Callable[[Backend, str, str | None], Any]
    ) -> Any:
        """``run`` for a call that changes memory: it gets who signs the change (None: the backend's own)."""
        group_id = group or self.default_group
        if not group_id:
            raise ToolError("invalid_input: no group given and the server has no default group (--group)")
        actor = self.guard(ctx, group_id, role) if self.guard is not None else None
        backend = self.backend()
        try:
            return await anyio.to_thread.run_sync(lambda: call(backend, group_id, actor))
        except EpimemError as error:
            raise ToolError(f"{error.code}: {error.message}") from error
        except ValidationError as error:  # a value the facade's own models refuse
            raise ToolError(f"invalid_input: {problems(error)}") from None


def build_server(
    backend: Callable[[], Backend],
    *,
    default_group: str | None = None,
    guard: Guard | None = None,
    limits: BatchLimits | None = None,
) -> MCPServer:
    """The eight tools on one ``MCPServer``; ``backend()`` is called for every tool call. ``limits``:
    the HTTP routes' batch limits (a backend that is a remote server applies its own)."""
    tools = Tools(backend, default_group, guard, limits)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server = EpimemMCPServer(
        "epimem",
        instructions="Long-term episodic memory: store conversations, then search them or get cited context.",
    )
    # The SDK configures the root logger (a rich console handler) when it has none: the server's own log
    # format stays the only one (api.logs sends the SDK's records through it).
    root.handlers[:], root.level = handlers, level
    register_recall_tools(server, tools)
    register_browse_tools(server, tools)
    return server


def register_recall_tools(server: MCPServer, tools: Tools) -> None:
    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
    async def add_messages(
        ctx: Context,
        session: SessionArg,
        messages: Annotated[list[ChatMessage], Field(min_length=1, description="the messages, oldest first")],
        group: GroupArg = None,
        flush: Annotated[
            bool, Field(description="form the session's open stretch into episodes now (rarely needed)")
        ] = False,
    ) -> dict[str, Any]:
        """Store messages of a conversation in memory (idempotent by message id). They are found by
        search_memory and get_context as soon as this returns; episodes form on their own when the
        session goes quiet, so there is no need to flush."""

        def call(b: Backend, g: str, actor: str | None) -> dict[str, Any]:
            if tools.limits is not None:
                check_batch(messages, tools.limits)
            batch = [m.to_message() for m in messages]
            receipt = b.add_messages(g, session, batch, **signed_by(actor))
            episodes = b.flush(g, session, **signed_by(actor)) if flush else []
            return {
                "accepted": list(receipt.accepted),
                "duplicates": list(receipt.duplicates),
                "episodes_created": [e.uuid for e in episodes],
            }

        return dict(await tools.signed(ctx, group, WRITE, call))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search_memory(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="what to look for, in plain words")],
        group: GroupArg = None,
        k: Annotated[int, Field(ge=1, le=100, description="how many episodes to return")] = 5,
        min_score: Annotated[
            float, Field(ge=0.0, le=1.0, description="only hits scoring at least this (0..1, the same for any query)")
        ] = 0.0,
        sessions: SessionsArg = None,
        time: TimeArg = None,
        reference_time: RefTimeArg = None,
        filter: FilterArg = None,  # noqa: A002 (the API's name for it)
    ) -> list[Hit]:
        """Find the episodes (remembered stretches of conversation) most relevant to a query, best first, each
        with a score from 0 to 1 (about the chance that it holds what was asked; min_score 0.05 drops nearly every
        hit of a question memory cannot answer); messages not in an episode yet come as their session's open
        stretch (pending: true)."""
        options = {"k": k, "min_score": min_score, **scope_of(sessions, time, reference_time, filter)}
        hits = await tools.run(ctx, group, READ, lambda b, g: b.search(g, query, **options))
        return [hit_of(hit) for hit in hits]

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_context(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="the question the context should answer")],
        group: GroupArg = None,
        token_budget: Annotated[int, Field(ge=16, le=32_000, description="most tokens of text to return")] = 1000,
        sessions: SessionsArg = None,
        time: TimeArg = None,
        reference_time: RefTimeArg = None,
        filter: FilterArg = None,  # noqa: A002 (the API's name for it)
    ) -> dict[str, Any]:
        """Memory packed for a prompt: cited text within a token budget, in time order (messages just
        added included; their citations say pending: true). Each piece of the text opens with its marker
        ([1], [2], ...), the `marker` of its citation. A long message may be held in part, "speaker (excerpt):
        … text …": its citation's `excerpts` give the span (get_message returns it whole). With a speaker
        filter it cites only what those speakers said."""
        options = {"token_budget": token_budget, **scope_of(sessions, time, reference_time, filter)}
        result = await tools.run(ctx, group, READ, lambda b, g: b.context(g, query, **options))
        return dict(result.model_dump(mode="json"))


def register_browse_tools(server: MCPServer, tools: Tools) -> None:
    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_timeline(
        ctx: Context,
        group: GroupArg = None,
        session: Annotated[str | None, Field(description="only this session")] = None,
        start: Annotated[Timestamp | None, Field(description="from this time (inclusive, ISO 8601)")] = None,
        end: Annotated[Timestamp | None, Field(description="until this time (exclusive, ISO 8601)")] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="episodes per page")] = 20,
        cursor: Annotated[str | None, Field(description="`next_cursor` of the previous page")] = None,
        filter: FilterArg = None,  # noqa: A002 (the API's name for it)
    ) -> dict[str, Any]:
        """Episodes in time order (oldest first), paged."""
        params = {"session_id": session, "start": start, "end": end, "limit": limit, "cursor": cursor, "filter": filter}
        params = {key: value for key, value in params.items() if value is not None}
        page = await tools.run(ctx, group, READ, lambda b, g: b.timeline(g, **params))
        return dict(page.model_dump(mode="json"))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_episode(
        ctx: Context,
        episode_id: Annotated[str, Field(description="the episode's id (from search_memory or get_timeline)")],
        session: SessionArg,
        group: GroupArg = None,
    ) -> dict[str, Any]:
        """One episode with the exact messages it was made from."""

        def call(b: Backend, g: str) -> dict[str, Any]:
            episode = b.get_episode(g, session, episode_id)
            messages = b.episode_messages(g, episode)
            return {
                "episode": episode.model_dump(mode="json"),
                "messages": [m.model_dump(mode="json") for m in messages],
            }

        return dict(await tools.run(ctx, group, READ, call))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_message(
        ctx: Context,
        message_id: Annotated[str, Field(description="the message's id (from a citation or an episode)")],
        session: SessionArg,
        group: GroupArg = None,
    ) -> dict[str, Any]:
        """One message as stored, whole: what a citation's excerpt (a span of its content) was cut from."""
        message = await tools.run(ctx, group, READ, lambda b, g: b.get_message(g, session, message_id))
        return dict(message.model_dump(mode="json"))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def list_sessions(ctx: Context, group: GroupArg = None) -> list[dict[str, Any]]:
        """The sessions (conversation threads) of a group, oldest first."""
        sessions = await tools.run(ctx, group, READ, lambda b, g: b.list_sessions(g))
        return [s.model_dump(mode="json") for s in sessions]

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False, read_only_hint=False))
    async def correct_episode(
        ctx: Context,
        episode_id: Annotated[str, Field(description="the episode's id (from search_memory or get_timeline)")],
        session: SessionArg,
        group: GroupArg = None,
        title: Annotated[str | None, Field(min_length=1, max_length=500, description="the right title")] = None,
        content: Annotated[str | None, Field(min_length=1, description="the right account of what happened")] = None,
        reason: Annotated[str | None, Field(max_length=1000, description="why (kept with the revision)")] = None,
    ) -> dict[str, Any]:
        """Correct an episode that got something wrong (who said what, a wrong title). The earlier text
        stays in the episode's revisions; the messages it was made from are not changed."""
        changes = {"title": title, "content": content, "reason": reason}

        def call(b: Backend, g: str, actor: str | None) -> dict[str, Any]:
            episode = b.correct_episode(g, session, episode_id, **changes, **signed_by(actor))
            return {"episode": episode.model_dump(mode="json")}

        return dict(await tools.signed(ctx, group, WRITE, call))

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True, read_only_hint=False))
    async def delete_session(ctx: Context, session: SessionArg, group: GroupArg = None) -> dict[str, Any]:
        """Delete a session: its messages, episodes and vectors. Cannot be undone."""

        def delete(b: Backend, g: str, actor: str | None) -> Any:
            return b.delete_session(g, session, **signed_by(actor))

        receipt = await tools.signed(ctx, group, ADMIN, delete)
        return {"messages": len(receipt.messages), "episodes": len(receipt.episodes), "vectors": receipt.vectors}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epimem mcp", description="epimem's MCP server over stdio")
    parser.add_argument("--data-dir", help="data folder of the in-process service (default: EPIMEM_DATA_DIR)")
    parser.add_argument("--url", help="a running epimem instead of a data folder, e.g. http://127.0.0.1:8000")
    parser.add_argument("--api-key", help="API key for --url (default: EPIMEM_API_KEY)")
    parser.add_argument("--group", help="default group when a tool call names none")
    return parser


def _log_one_line_each() -> None:
    """stderr gets one plain line per refused call; the SDK's own records below WARNING stay out."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("epimem mcp: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """``epimem mcp``: serve the tools over stdio until the client closes the pipe."""
    import os

    args = _parser().parse_args(argv)
    _log_one_line_each()
    if args.url:
        from epimem_client import EpimemClient

        client = EpimemClient(args.url, api_key=args.api_key or os.environ.get("EPIMEM_API_KEY"))
        if not client.ready():  # it may be started later: serve, every tool says why it fails
            print(
                f"epimem mcp: warning: no epimem answers at {args.url}; every tool fails until it does", file=sys.stderr
            )
        # The client returns its own wire models, with the same fields as the facade's that the tools read.
        server = build_server(lambda: cast(Backend, client), default_group=args.group)
        try:
            server.run("stdio")
        finally:
            client.close()
        return 0
    try:
        from api.facade import Epimem
        from api.settings import load_settings
    except ImportError as error:  # a client-only install: only --url can work
        print(
            f"epimem mcp: serving a data folder needs the server ({error.name} is missing): "
            "pip install 'epimem-server[mcp]', or pass --url of a running epimem",
            file=sys.stderr,
        )
        return 1

    try:
        settings = load_settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
        service = Epimem.from_settings(settings)
    except EpimemError as error:  # e.g. the folder is held by a running server
        print(f"epimem mcp: {error.message}", file=sys.stderr)
        return 1
    try:
        build_server(lambda: service, default_group=args.group, limits=settings).run("stdio")
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
