"""Every operation of the HTTP API described once, for both clients: its method, path, parameters and
body, and how its answer is read; the server's error body read back as the matching ``EpimemError``;
a failed connection as ``ServerUnreachableError``."""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from epimem_client import errors
from epimem_client.models import (
    AddReceipt,
    AuditPage,
    ContextResult,
    CorrectedOut,
    DeletionReceipt,
    Episode,
    EpisodeOut,
    EpisodesOut,
    GroupConfiguration,
    GroupsOut,
    GroupStats,
    HistoryOut,
    ImportReceipt,
    Message,
    MessageOut,
    MessagePage,
    RedactionReceipt,
    RevisionsOut,
    SearchHit,
    SearchOut,
    SessionInfo,
    SessionsOut,
    TimelinePage,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
# A message to add: a mapping with the HTTP API's fields, or any pydantic model with them (the client's
# Message, or the server's).
MessageInput = BaseModel | Mapping[str, Any]


def _error_classes() -> dict[str, type[errors.EpimemError]]:
    found: dict[str, type[errors.EpimemError]] = {}
    pending: list[type[errors.EpimemError]] = [errors.EpimemError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found


_BY_STATUS: dict[int, type[errors.EpimemError]] = {
    400: errors.InvalidInputError,
    401: errors.UnauthorizedError,
    403: errors.ForbiddenError,
    404: errors.NotFoundError,
    405: errors.InvalidInputError,
    409: errors.ConflictError,
    413: errors.PayloadTooLargeError,
    422: errors.InvalidInputError,
    429: errors.TooManyRequestsError,
    503: errors.StoreUnavailableError,
}


def error_from_response(response: httpx.Response) -> errors.EpimemError:
    """The server's ``{"error": {"code", "message", "details"}}`` as the matching exception. A code this
    client does not know maps by HTTP status."""
    try:
        body = response.json()["error"]
        code, message, details = str(body["code"]), str(body["message"]), body.get("details")
    except (ValueError, KeyError, TypeError):
        code, message, details = "", f"HTTP {response.status_code}: {response.text[:200]}", None
    cls = _error_classes().get(code) or _BY_STATUS.get(response.status_code, errors.EpimemError)
    if issubclass(cls, errors.StoreUnavailableError | errors.TooManyRequestsError):
        retry = response.headers.get("retry-after", "5")
        return cls(message, retry_after=int(retry) if retry.isdigit() else 5, details=details)
    return cls(message, details=details)


@functools.cache
def tls() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), built once
    per process and shared by the clients it makes: building one takes ~17 ms of CPU."""
    return httpx.create_ssl_context()


def unreachable(base_url: object, error: httpx.TransportError) -> errors.ServerUnreachableError:
    """A connection that failed before any answer, said as what to check."""
    if isinstance(error, httpx.TimeoutException):
        what = f"epimem at {base_url} did not answer in time ({type(error).__name__})"
    else:
        what = f"no epimem answered at {base_url} ({error or type(error).__name__})"
    return errors.ServerUnreachableError(f"{what}: is `epimem serve` running there?")


def path_segment(value: str) -> str:
    """One URL path segment. Ids with '/' cannot be addressed; '.'/'..' are encoded so that no URL
    normalisation turns them into a different path."""
    if "/" in value:
        raise errors.InvalidInputError("ids containing '/' cannot be addressed over HTTP; use the Python facade")
    if value and set(value) == {"."}:
        return "%2E" * len(value)
    return quote(value, safe="")


def _model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: cls.model_validate_json(response.content)


def _part(wrapper: type[BaseModel], name: str) -> Callable[[httpx.Response], Any]:
    """One field of a response object."""
    return lambda response: getattr(wrapper.model_validate_json(response.content), name)


class SummaryOptions(TypedDict, total=False):
    days_back: float
    max_memories_per_summary: int
    session_id: str | None
    reference_time: datetime | None


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def group_path(group_id: str) -> str:
    return f"/v1/groups/{path_segment(group_id)}"


def session_path(group_id: str, session_id: str) -> str:
    return f"{group_path(group_id)}/sessions/{path_segment(session_id)}"


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    return value


def _messages_json(messages: Iterable[MessageInput]) -> list[Any]:
    return [m.model_dump(mode="json") if isinstance(m, BaseModel) else dict(m) for m in messages]


def _query_json(query: str | BaseModel, options: dict[str, Any]) -> dict[str, Any]:
    """A search or context request: the query text and options (the server validates them and answers
    a bad one with ``InvalidInputError``), or a whole request model."""
    if isinstance(query, BaseModel):
        return query.model_dump(mode="json", exclude_defaults=True)
    return {"query": query, **{key: _json_value(value) for key, value in options.items() if value is not None}}


def _params(**values: Any) -> dict[str, Any]:
    return {k: _param(v) for k, v in values.items() if v is not None}


def _param(value: Any) -> str:
    """A query-string value: times in ISO 8601, a filter (a mapping or a model) as its JSON."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump_json(exclude_none=True)
    if isinstance(value, Mapping):
        return json.dumps(value)
    return str(value)


def _delete(path: str) -> Call[DeletionReceipt]:
    return Call("DELETE", path, _model(DeletionReceipt))


class Calls:
    """Every operation, described once."""

    @staticmethod
    def correct_episode(group_id: str, session_id: str, episode_id: str, changes: dict[str, Any]) -> Call[Episode]:
        path = f"{session_path(group_id, session_id)}/episodes/{path_segment(episode_id)}"
        body = {k: v for k, v in changes.items() if v is not None}
        return Call("PATCH", path, _part(CorrectedOut, "episode"), json=body)

    @staticmethod
    def episode_revisions(group_id: str, session_id: str, episode_id: str) -> Call[Any]:
        path = f"{session_path(group_id, session_id)}/episodes/{path_segment(episode_id)}/revisions"
        return Call("GET", path, _part(RevisionsOut, "revisions"))

    @staticmethod
    def redact_message(
        group_id: str, session_id: str, message_id: str, replacement: str | None
    ) -> Call[RedactionReceipt]:
        path = f"{session_path(group_id, session_id)}/messages/{path_segment(message_id)}/redact"
        body = {"replacement": replacement} if replacement is not None else None
        return Call("POST", path, _model(RedactionReceipt), json=body)

    @staticmethod
    def audit(group_id: str, limit: int, cursor: str | None) -> Call[AuditPage]:
        params = _params(limit=limit, cursor=cursor)
        return Call("GET", group_path(group_id) + "/audit", _model(AuditPage), params=params)

    @staticmethod
    def add_messages(group_id: str, session_id: str, messages: Iterable[MessageInput]) -> Call[AddReceipt]:
        body = {"messages": _messages_json(messages)}
        return Call("POST", session_path(group_id, session_id) + "/messages", _model(AddReceipt), json=body)

    @staticmethod
    def flush(group_id: str, session_id: str) -> Call[list[Episode]]:
        return Call("POST", session_path(group_id, session_id) + "/flush", _part(EpisodesOut, "episodes"))

    @staticmethod
    def get_message(group_id: str, session_id: str, message_id: str) -> Call[Message]:
        def parse(response: httpx.Response) -> Message:
            return MessageOut.model_validate_json(response.content).message

        return Call("GET", f"{session_path(group_id, session_id)}/messages/{path_segment(message_id)}", parse)

    @staticmethod
    def history(group_id: str, session_id: str, limit: int, cursor: str | None) -> Call[MessagePage]:
        def parse(response: httpx.Response) -> MessagePage:
            page = HistoryOut.model_validate_json(response.content)
            return MessagePage(page.messages, page.next_cursor)

        path = session_path(group_id, session_id) + "/messages"
        return Call("GET", path, parse, params=_params(limit=limit, cursor=cursor))

    @staticmethod
    def search(group_id: str, query: str | BaseModel, options: dict[str, Any]) -> Call[list[SearchHit]]:
        body = _query_json(query, options)
        return Call("POST", group_path(group_id) + "/search", _part(SearchOut, "hits"), json=body)

    @staticmethod
    def context(group_id: str, query: str | BaseModel, options: dict[str, Any]) -> Call[ContextResult]:
        body = _query_json(query, options)
        return Call("POST", group_path(group_id) + "/context", _model(ContextResult), json=body)

    @staticmethod
    def timeline(group_id: str, params: dict[str, Any]) -> Call[TimelinePage]:
        return Call("GET", group_path(group_id) + "/timeline", _model(TimelinePage), params=_params(**params))

    @staticmethod
    def get_episode(group_id: str, session_id: str, episode_id: str, expand: bool) -> Call[EpisodeOut]:
        path = f"{session_path(group_id, session_id)}/episodes/{path_segment(episode_id)}"
        return Call("GET", path, _model(EpisodeOut), params={"expand": "messages"} if expand else {})

    @staticmethod
    def put_group(config: BaseModel) -> Call[GroupConfiguration]:
        body = config.model_dump(mode="json", include={"description", "agent_ids", "user_ids", "metadata"})
        return Call("PUT", group_path(config.group_id), _model(GroupConfiguration), json=body)  # type: ignore[attr-defined]

    @staticmethod
    def get_group(group_id: str) -> Call[GroupConfiguration]:
        return Call("GET", group_path(group_id), _model(GroupConfiguration))

    @staticmethod
    def put_session(info: BaseModel) -> Call[SessionInfo]:
        body = info.model_dump(mode="json", include={"title", "agent_ids", "user_ids", "metadata"})
        path = session_path(info.group_id, info.session_id)  # type: ignore[attr-defined]
        return Call("PUT", path, _model(SessionInfo), json=body)

    @staticmethod
    def get_session(group_id: str, session_id: str) -> Call[SessionInfo]:
        return Call("GET", session_path(group_id, session_id), _model(SessionInfo))

    @staticmethod
    def list_sessions(group_id: str) -> Call[list[SessionInfo]]:
        return Call("GET", group_path(group_id) + "/sessions", _part(SessionsOut, "sessions"))

    @staticmethod
    def delete_message(group_id: str, session_id: str, message_id: str) -> Call[DeletionReceipt]:
        return _delete(f"{session_path(group_id, session_id)}/messages/{path_segment(message_id)}")

    @staticmethod
    def delete_episode(group_id: str, session_id: str, episode_id: str) -> Call[DeletionReceipt]:
        return _delete(f"{session_path(group_id, session_id)}/episodes/{path_segment(episode_id)}")

    @staticmethod
    def delete_session(group_id: str, session_id: str) -> Call[DeletionReceipt]:
        return _delete(session_path(group_id, session_id))

    @staticmethod
    def delete_group(group_id: str) -> Call[DeletionReceipt]:
        return _delete(group_path(group_id))

    @staticmethod
    def summaries(
        group_id: str,
        *,
        days_back: float = 7,
        max_memories_per_summary: int = 50,
        session_id: str | None = None,
        reference_time: datetime | None = None,
    ) -> Call[list[Episode]]:
        body = {
            "days_back": days_back,
            "max_memories_per_summary": max_memories_per_summary,
            "session_id": session_id,
            "reference_time": reference_time.isoformat() if reference_time is not None else None,
        }
        json = {key: value for key, value in body.items() if value is not None}
        return Call("POST", group_path(group_id) + "/summaries", _part(EpisodesOut, "episodes"), json=json)

    @staticmethod
    def import_group(lines: Iterable[str], group_id: str) -> Call[ImportReceipt]:
        content = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()
        headers = {"content-type": "application/x-ndjson"}
        return Call("POST", group_path(group_id) + "/import", _model(ImportReceipt), content=content, headers=headers)

    @staticmethod
    def export(group_id: str, include_embeddings: bool) -> Call[None]:
        """Streamed: the clients read the lines themselves."""
        params = {"include_embeddings": str(include_embeddings).lower()}
        return Call("GET", group_path(group_id) + "/export", lambda _response: None, params=params)

    @staticmethod
    def groups(cursor: str | None) -> Call[GroupsOut]:
        """One page of the groups the key can read, with their counts."""
        return Call("GET", "/v1/groups", _model(GroupsOut), params=_params(limit=100, cursor=cursor))

    @staticmethod
    def group_stats(group_id: str) -> Call[GroupStats]:
        parse = lambda response: GroupStats.model_validate(response.json()["group"])  # noqa: E731
        return Call("GET", group_path(group_id) + "/overview", parse, params={"limit": 1})
