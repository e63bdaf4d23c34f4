"""The HTTP routes. Each one authorizes, validates what only the HTTP surface knows (batch and
message limits from settings) and calls the facade; the logic lives in memory/ and retrieval/.

Roles: read = get/search/context/timeline/list/history; write = messages, flush, put, import,
summaries; admin = every delete, export, metrics (when keys are configured); corrections: api.http.corrections.
"""

from __future__ import annotations

import codecs
import itertools
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api.auth import Principal, Role
from api.facade import Epimem
from api.http import params
from api.http.access import add_within_limits, import_within_limits
from api.http.error_handling import error_responses
from api.http.params import EpisodeIdPath, FilterQuery, GroupId, MessageIdPath, SessionId, SessionIdQuery, parse_filter
from api.http.schemas import (
    EpisodeOut,
    EpisodesOut,
    GroupConfigurationIn,
    HistoryOut,
    MessageOut,
    MessagesIn,
    SearchOut,
    SessionInfoIn,
    SessionsOut,
    SummariesIn,
)
from api.limits import check_batch
from api.settings import Settings
from memory.errors import InvalidInputError, NotFoundError
from memory.models import GroupConfiguration, SessionInfo, UtcDatetime
from memory.receipts import AddReceipt, DeletionReceipt, ImportReceipt
from memory.store.records import is_open_episode_id
from memory.timeutil import utc_now
from retrieval.types import MAX_TIMELINE_LIMIT, ContextQuery, ContextResult, Direction, SearchQuery, TimelinePage

_bearer = HTTPBearer(auto_error=False, description="an API key from EPIMEM_API_KEYS_FILE (not needed in local mode)")


def get_service(request: Request) -> Epimem:
    service: Epimem = request.app.state.service
    return service


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


ServiceDep = Annotated[Epimem, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def _authorizer(role: Role, *, server_wide: bool = False) -> Any:
    def authorize(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Principal:
        # Runs before path/body validation and before any store access, from the raw path.
        principal: Principal = request.app.state.keys.authorize(request, role, server_wide=server_wide)
        return principal

    return Depends(authorize)


READ = _authorizer(Role.READ)
WRITE = _authorizer(Role.WRITE)
ADMIN = _authorizer(Role.ADMIN)
SERVER_ADMIN = _authorizer(Role.ADMIN, server_wide=True)  # figures of every group: a key for '*'

v1 = APIRouter(prefix="/v1", responses=error_responses(401, 403, 404, 409, 413, 415, 422, 429, 503))

GROUP = "/groups/{group_id}"
SESSION = GROUP + "/sessions/{session_id}"


# -- messages and episodes ---------------------------------------------------------------------


@v1.post(
    SESSION + "/messages",
    tags=["messages"],
    responses=error_responses(409),
    summary="Add a batch of messages (idempotent by message id)",
)
def add_messages(
    group_id: GroupId,
    session_id: SessionId,
    body: MessagesIn,
    settings: SettingsDep,
    who: Annotated[Principal, WRITE],
    request: Request,
) -> AddReceipt:
    """Stores the messages durably before answering. Episodes form off the request path once
    enough messages are pending, or on flush. The same id with the same content again is reported as
    a duplicate; the same id with other content is a 409 and nothing of the batch is written (429 too)."""
    check_batch(body.messages, settings)
    return add_within_limits(request, who, group_id, session_id, body.messages)


@v1.get(SESSION + "/messages", tags=["messages"], dependencies=[READ], summary="Message history of a session")
def history(
    group_id: GroupId,
    session_id: SessionId,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: params.CursorQuery = None,
) -> HistoryOut:
    """The session's messages in event-time order, paged by cursor."""
    page = service.history(group_id, session_id, limit=limit, cursor=cursor)
    return HistoryOut(messages=page, next_cursor=page.next_cursor)


@v1.get(
    SESSION + "/messages/{message_id}",
    tags=["messages"],
    dependencies=[READ],
    responses=error_responses(404),
    summary="One message, whole and verbatim",
)
def get_message(group_id: GroupId, session_id: SessionId, message_id: MessageIdPath, service: ServiceDep) -> MessageOut:
    """The message as stored: what a citation's excerpt (a span of its content) was cut from."""
    return MessageOut(message=service.get_message(group_id, session_id, message_id))


@v1.delete(
    SESSION + "/messages/{message_id}",
    tags=["messages"],
    responses=error_responses(404),
    summary="Delete one message (and rebuild what was made from it)",
)
def delete_message(
    group_id: GroupId,
    session_id: SessionId,
    message_id: MessageIdPath,
    service: ServiceDep,
    who: Annotated[Principal, ADMIN],
) -> DeletionReceipt:
    return service.delete_message(group_id, session_id, message_id, actor=who.actor)


@v1.post(SESSION + "/flush", tags=["messages"], summary="Form episodes from every pending message")
def flush(
    group_id: GroupId, session_id: SessionId, service: ServiceDep, who: Annotated[Principal, WRITE]
) -> EpisodesOut:
    """Returns once every pending message of the session is in an episode that is stored and searchable."""
    return EpisodesOut(episodes=service.flush(group_id, session_id, actor=who.actor))


@v1.get(
    SESSION + "/episodes/{episode_id}",
    tags=["episodes"],
    dependencies=[READ],
    responses=error_responses(404),
    summary="One episode, optionally with its source messages",
)
def get_episode(
    group_id: GroupId,
    session_id: SessionId,
    episode_id: EpisodeIdPath,
    service: ServiceDep,
    expand: Annotated[Literal["messages"] | None, Query(description="`messages`: include the source messages")] = None,
) -> EpisodeOut:
    episode = service.get_episode(group_id, session_id, episode_id)
    messages = service.episode_messages(group_id, episode) if expand == "messages" else None
    return EpisodeOut(episode=episode, messages=messages, pending=is_open_episode_id(episode.uuid))


@v1.delete(
    SESSION + "/episodes/{episode_id}",
    tags=["episodes"],
    responses=error_responses(404),
    summary="Delete one episode and the messages it was made of (a summary: only the summary)",
)
def delete_episode(
    group_id: GroupId,
    session_id: SessionId,
    episode_id: EpisodeIdPath,
    service: ServiceDep,
    who: Annotated[Principal, ADMIN],
) -> DeletionReceipt:
    """An episode goes with the messages it was made of (log and vectors); summaries citing it are
    rebuilt from what remains. A summary goes alone: its sources stay and lose their mark. On
    embedded Chroma the bytes are erased from the data folder before the answer (docs/trust.md)."""
    return service.delete_episode(group_id, session_id, episode_id, actor=who.actor)


# -- reading -----------------------------------------------------------------------------------

_SEARCH_EXAMPLES = {
    "simple": {"summary": "by meaning and keyword", "value": {"query": "Where did Caroline go hiking?", "k": 5}},
    "scoped": {
        "summary": "one session, last week, in time order, with messages",
        "value": {
            "query": "dog",
            "session_ids": ["chat-1"],
            "time": "last week",
            "reference_time": "2023-05-15T00:00:00Z",
            "order": "chronological",
            "expand": True,
        },
    },
}


@v1.post(GROUP + "/search", tags=["recall"], dependencies=[READ], summary="Search the episodes of a group")
def search(
    group_id: GroupId, query: Annotated[SearchQuery, Body(openapi_examples=_SEARCH_EXAMPLES)], service: ServiceDep
) -> SearchOut:
    return SearchOut(hits=service.search(group_id, query))


@v1.post(
    GROUP + "/context",
    tags=["recall"],
    dependencies=[READ],
    summary="A token-budgeted, cited context block for a prompt",
)
def context(
    group_id: GroupId,
    query: Annotated[
        ContextQuery,
        Body(openapi_examples={"rag": {"value": {"query": "What does Caroline like?", "token_budget": 500}}}),
    ],
    service: ServiceDep,
) -> ContextResult:
    return service.context(group_id, query)


@v1.get(GROUP + "/timeline", tags=["recall"], dependencies=[READ], summary="Episodes in time order, paged")
def timeline(
    group_id: GroupId,
    service: ServiceDep,
    session_id: SessionIdQuery = None,
    start: Annotated[UtcDatetime | None, Query(description="inclusive; ISO 8601 or epoch seconds")] = None,
    end: Annotated[UtcDatetime | None, Query(description="exclusive; ISO 8601 or epoch seconds")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_TIMELINE_LIMIT)] = 50,
    cursor: params.CursorQuery = None,
    order: Direction = Direction.ASC,
    filter: FilterQuery = None,  # noqa: A002 (the name the API uses everywhere)
) -> TimelinePage:
    scope = {"start": start, "end": end, "filter": parse_filter(filter)}
    return service.timeline(group_id, session_id=session_id, limit=limit, cursor=cursor, order=order, **scope)


# -- groups and sessions -----------------------------------------------------------------------


@v1.put(GROUP, tags=["groups"], dependencies=[WRITE], summary="Create or replace a group's configuration")
def put_group(group_id: GroupId, body: GroupConfigurationIn, service: ServiceDep) -> GroupConfiguration:
    created = utc_now()
    try:
        created = service.get_group(group_id).created_at
    except NotFoundError:
        pass  # a new group: created now
    config = GroupConfiguration(group_id=group_id, created_at=created, updated_at=utc_now(), **body.model_dump())
    return service.put_group(config)


@v1.get(GROUP, tags=["groups"], dependencies=[READ], responses=error_responses(404), summary="A group's configuration")
def get_group(group_id: GroupId, service: ServiceDep) -> GroupConfiguration:
    return service.get_group(group_id)


@v1.delete(GROUP, tags=["groups"], summary="Delete a group and everything in it")
def delete_group(group_id: GroupId, service: ServiceDep, who: Annotated[Principal, ADMIN]) -> DeletionReceipt:
    return service.delete_group(group_id, actor=who.actor)


@v1.get(GROUP + "/sessions", tags=["sessions"], dependencies=[READ], summary="The sessions of a group")
def list_sessions(group_id: GroupId, service: ServiceDep) -> SessionsOut:
    return SessionsOut(sessions=service.list_sessions(group_id))


@v1.put(SESSION, tags=["sessions"], dependencies=[WRITE], summary="Create or replace a session's metadata")
def put_session(group_id: GroupId, session_id: SessionId, body: SessionInfoIn, service: ServiceDep) -> SessionInfo:
    created = utc_now()
    try:
        created = service.get_session(group_id, session_id).created_at
    except NotFoundError:
        pass  # a new session: created now
    info = SessionInfo(
        group_id=group_id, session_id=session_id, created_at=created, updated_at=utc_now(), **body.model_dump()
    )
    return service.put_session(info)


@v1.get(SESSION, tags=["sessions"], dependencies=[READ], responses=error_responses(404), summary="A session's metadata")
def get_session(group_id: GroupId, session_id: SessionId, service: ServiceDep) -> SessionInfo:
    return service.get_session(group_id, session_id)


@v1.delete(SESSION, tags=["sessions"], summary="Delete a session and everything in it")
def delete_session(
    group_id: GroupId, session_id: SessionId, service: ServiceDep, who: Annotated[Principal, ADMIN]
) -> DeletionReceipt:
    return service.delete_session(group_id, session_id, actor=who.actor)


# -- summaries, export, import -------------------------------------------------------------------


@v1.post(GROUP + "/summaries", tags=["summaries"], summary="Summarise recent episodes")
def summaries(
    group_id: GroupId, body: SummariesIn, service: ServiceDep, who: Annotated[Principal, WRITE]
) -> EpisodesOut:
    """Compacts the episodes of the last `days_back` days into summary episodes linked to every
    source; nothing summarised is deleted."""
    episodes = service.generate_summaries(
        group_id,
        days_back=body.days_back,
        max_memories_per_summary=body.max_memories_per_summary,
        session_id=body.session_id,
        reference_time=body.reference_time,
        actor=who.actor,
    )
    return EpisodesOut(episodes=episodes)


@v1.get(
    GROUP + "/export",
    tags=["export"],
    dependencies=[ADMIN],
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}, "description": "JSON Lines"}},
    summary="Export a group as JSON Lines",
)
def export_group(
    group_id: GroupId,
    service: ServiceDep,
    include_embeddings: Annotated[bool, Query(description="also export the vectors")] = False,
) -> StreamingResponse:
    lines = iter(service.export_group(group_id, include_embeddings=include_embeddings))
    # Pull the first line here so that errors (store down, bad input) still get a proper status.
    first = next(lines, None)
    head = [] if first is None else [first]
    body = (line if line.endswith("\n") else line + "\n" for line in itertools.chain(head, lines))
    return StreamingResponse(body, media_type="application/x-ndjson")


@v1.post(
    GROUP + "/import",
    tags=["export"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "JSON Lines as written by export (records of other groups are imported into this one)",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    },
    summary="Import JSON Lines written by export (idempotent)",
)
async def import_group(group_id: GroupId, request: Request, who: Annotated[Principal, WRITE]) -> ImportReceipt:
    """Streams in (up to `max_import_bytes`); adds what the group lacks, never changes it (409). A write key
    imports sessions and messages; episodes, revisions and embeddings need an admin key for '*' (docs/trust.md).
    The messages it adds count against the key's and the group's limits as an add's do (429 over one)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines: list[str] = []
    tail, read = "", 0
    try:
        async for chunk in request.stream():
            text = tail + decoder.decode(chunk)
            *complete, tail = text.split("\n")
            lines += [line for line in complete if line.strip()]
            read += len(chunk)
        tail += decoder.decode(b"", final=True)
    except UnicodeDecodeError as error:  # the position is about where the bad bytes start
        raise InvalidInputError("the import body is not UTF-8 text", details={"position": read + error.start}) from None
    if tail.strip():
        lines.append(tail)
    restore = who.key is None or (who.key.role >= Role.ADMIN and who.key.every_group)
    return await run_in_threadpool(import_within_limits, request, who, group_id, lines, restore=restore)
