"""HTTP clients for an epimem server, mirroring the facade: same method names, same result types,
errors mapped back to the ``EpimemError`` subclasses.

    from api.client import EpimemClient
    with EpimemClient("http://127.0.0.1:8000", api_key=None) as memory:
        memory.add_messages("team", "chat-1", [{"id": "1", "content": "Ana adopted a dog called Rex."}])
        memory.flush("team", "chat-1")
        hits = memory.search("team", "Who has a dog?")

``AsyncEpimemClient`` has the same methods as coroutines. Each operation is described once (an
``_Call``: request + parser); the two clients only differ in how they send it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from memory import errors
from memory.errors import EpimemError, InvalidInputError
from memory.models import Episode, GroupConfiguration, Message, SessionInfo
from memory.receipts import AddReceipt, DeletionReceipt, ImportReceipt
from retrieval.types import ContextQuery, ContextResult, SearchHit, SearchQuery, TimelinePage

T = TypeVar("T")
MessageInput = Message | Mapping[str, Any]

DEFAULT_URL = "http://127.0.0.1:8000"


def _error_classes() -> dict[str, type[EpimemError]]:
    found: dict[str, type[EpimemError]] = {}
    pending: list[type[EpimemError]] = [EpimemError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found


_BY_STATUS: dict[int, type[EpimemError]] = {
    400: errors.InvalidInputError,
    401: errors.UnauthorizedError,
    403: errors.ForbiddenError,
    404: errors.NotFoundError,
    405: errors.InvalidInputError,
    409: errors.ConflictError,
    413: errors.PayloadTooLargeError,
    422: errors.InvalidInputError,
    503: errors.StoreUnavailableError,
}


def error_from_response(response: httpx.Response) -> EpimemError:
    """The server's ``{"error": {"code", "message", "details"}}`` as the matching exception."""
    try:
        body = response.json()["error"]
        code, message, details = str(body["code"]), str(body["message"]), body.get("details")
    except (ValueError, KeyError, TypeError):
        code, message, details = "", f"HTTP {response.status_code}: {response.text[:200]}", None
    cls = _error_classes().get(code) or _BY_STATUS.get(response.status_code, EpimemError)
    if issubclass(cls, errors.StoreUnavailableError):
        retry = response.headers.get("retry-after", "5")
        return cls(message, retry_after=int(retry) if retry.isdigit() else 5, details=details)
    return cls(message, details=details)


def _segment(value: str) -> str:
    """One URL path segment. Ids with '/' cannot be addressed; '.'/'..' are encoded so that no URL
    normalisation turns them into a different path."""
    if "/" in value:
        raise InvalidInputError("ids containing '/' cannot be addressed over HTTP; use the Python facade")
    if value and set(value) == {"."}:
        return "%2E" * len(value)
    return quote(value, safe="")


def _model(cls: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda response: cls.model_validate_json(response.content)


def _field(name: str, kind: Any) -> Callable[[httpx.Response], Any]:
    """One field of a response object, validated as ``kind`` (the server's wrappers live in
    ``api.schemas``, which needs FastAPI: the client reads the same JSON without it)."""
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    return lambda response: adapter.validate_python(response.json()[name])


def _dataclass(kind: type[T]) -> Callable[[httpx.Response], T]:
    adapter = TypeAdapter(kind)
    return lambda response: adapter.validate_json(response.content)


class EpisodeOut(BaseModel):
    """``GET …/episodes/{id}``: the episode and, with ``?expand=messages``, its source messages."""

    episode: Episode
    messages: list[Message] | None = None


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _group(group_id: str) -> str:
    return f"/v1/groups/{_segment(group_id)}"


def _session(group_id: str, session_id: str) -> str:
    return f"{_group(group_id)}/sessions/{_segment(session_id)}"


def _messages_json(messages: Iterable[MessageInput]) -> list[Any]:
    return [m.model_dump(mode="json") if isinstance(m, Message) else dict(m) for m in messages]


def _params(**values: Any) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else str(v)) for k, v in values.items() if v is not None}


class _Calls:
    """Every operation, described once."""

    @staticmethod
    def add_messages(group_id: str, session_id: str, messages: Iterable[MessageInput]) -> _Call[AddReceipt]:
        body = {"messages": _messages_json(messages)}
        return _Call("POST", _session(group_id, session_id) + "/messages", _dataclass(AddReceipt), json=body)

    @staticmethod
    def flush(group_id: str, session_id: str) -> _Call[list[Episode]]:
        return _Call("POST", _session(group_id, session_id) + "/flush", _field("episodes", list[Episode]))

    @staticmethod
    def history(group_id: str, session_id: str, limit: int, offset: int) -> _Call[list[Message]]:
        return _Call(
            "GET",
            _session(group_id, session_id) + "/messages",
            _field("messages", list[Message]),
            params=_params(limit=limit, offset=offset),
        )

    @staticmethod
    def search(group_id: str, query: str | SearchQuery, options: dict[str, Any]) -> _Call[list[SearchHit]]:
        search = query if isinstance(query, SearchQuery) else SearchQuery(query=query, **options)
        body = search.model_dump(mode="json", exclude_defaults=True)
        return _Call("POST", _group(group_id) + "/search", _field("hits", list[SearchHit]), json=body)

    @staticmethod
    def context(group_id: str, query: str | ContextQuery, options: dict[str, Any]) -> _Call[ContextResult]:
        request = query if isinstance(query, ContextQuery) else ContextQuery(query=query, **options)
        body = request.model_dump(mode="json", exclude_defaults=True)
        return _Call("POST", _group(group_id) + "/context", _model(ContextResult), json=body)

    @staticmethod
    def timeline(group_id: str, params: dict[str, Any]) -> _Call[TimelinePage]:
        return _Call("GET", _group(group_id) + "/timeline", _model(TimelinePage), params=_params(**params))

    @staticmethod
    def get_episode(group_id: str, session_id: str, episode_id: str, expand: bool) -> _Call[EpisodeOut]:
        path = f"{_session(group_id, session_id)}/episodes/{_segment(episode_id)}"
        return _Call("GET", path, _model(EpisodeOut), params={"expand": "messages"} if expand else {})

    @staticmethod
    def put_group(config: GroupConfiguration) -> _Call[GroupConfiguration]:
        body = config.model_dump(mode="json", include={"description", "agent_ids", "user_ids", "metadata"})
        return _Call("PUT", _group(config.group_id), _model(GroupConfiguration), json=body)

    @staticmethod
    def get_group(group_id: str) -> _Call[GroupConfiguration]:
        return _Call("GET", _group(group_id), _model(GroupConfiguration))

    @staticmethod
    def put_session(info: SessionInfo) -> _Call[SessionInfo]:
        body = info.model_dump(mode="json", include={"title", "agent_ids", "user_ids", "metadata"})
        return _Call("PUT", _session(info.group_id, info.session_id), _model(SessionInfo), json=body)

    @staticmethod
    def get_session(group_id: str, session_id: str) -> _Call[SessionInfo]:
        return _Call("GET", _session(group_id, session_id), _model(SessionInfo))

    @staticmethod
    def list_sessions(group_id: str) -> _Call[list[SessionInfo]]:
        return _Call("GET", _group(group_id) + "/sessions", _field("sessions", list[SessionInfo]))

    @staticmethod
    def delete(path: str) -> _Call[DeletionReceipt]:
        return _Call("DELETE", path, _dataclass(DeletionReceipt))

    @staticmethod
    def summaries(group_id: str, body: dict[str, Any]) -> _Call[list[Episode]]:
        return _Call(
            "POST",
            _group(group_id) + "/summaries",
            _field("episodes", list[Episode]),
            json={k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in body.items() if v is not None},
        )

    @staticmethod
    def import_group(lines: Iterable[str], group_id: str) -> _Call[ImportReceipt]:
        content = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()
        headers = {"content-type": "application/x-ndjson"}
        return _Call("POST", _group(group_id) + "/import", _dataclass(ImportReceipt), content=content, headers=headers)

    @staticmethod
    def export_path(group_id: str) -> str:
        return _group(group_id) + "/export"


def _headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise error_from_response(response)
    return response


class EpimemClient:
    """Synchronous client. ``http`` lets you pass your own ``httpx.Client`` (or a FastAPI TestClient)."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        http: httpx.Client | None = None,
    ) -> None:
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._owned = http is None
        self._auth = _headers(api_key)

    def __enter__(self) -> EpimemClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def _do(self, call: _Call[T]) -> T:
        response = self._http.request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            content=call.content,
            headers={**self._auth, **call.headers},
        )
        return call.parse(_check(response))

    # -- the facade's operations ------------------------------------------------------------------

    def add_messages(self, group_id: str, session_id: str, messages: Iterable[MessageInput]) -> AddReceipt:
        return self._do(_Calls.add_messages(group_id, session_id, messages))

    def flush(self, group_id: str, session_id: str) -> list[Episode]:
        return self._do(_Calls.flush(group_id, session_id))

    def history(self, group_id: str, session_id: str, *, limit: int = 100, offset: int = 0) -> list[Message]:
        return self._do(_Calls.history(group_id, session_id, limit, offset))

    def search(self, group_id: str, query: str | SearchQuery, **options: Any) -> list[SearchHit]:
        return self._do(_Calls.search(group_id, query, options))

    def context(self, group_id: str, query: str | ContextQuery, **options: Any) -> ContextResult:
        return self._do(_Calls.context(group_id, query, options))

    def timeline(self, group_id: str, **params: Any) -> TimelinePage:
        """``session_id``, ``start``, ``end``, ``limit``, ``cursor``, ``order`` as in the facade."""
        return self._do(_Calls.timeline(group_id, params))

    def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        return self._do(_Calls.get_episode(group_id, session_id, episode_id, False)).episode

    def episode_messages(self, group_id: str, episode: Episode) -> list[Message]:
        out = self._do(_Calls.get_episode(group_id, episode.session_id, episode.uuid, True))
        return out.messages or []

    def put_group(self, config: GroupConfiguration) -> GroupConfiguration:
        return self._do(_Calls.put_group(config))

    def get_group(self, group_id: str) -> GroupConfiguration:
        return self._do(_Calls.get_group(group_id))

    def put_session(self, info: SessionInfo) -> SessionInfo:
        return self._do(_Calls.put_session(info))

    def get_session(self, group_id: str, session_id: str) -> SessionInfo:
        return self._do(_Calls.get_session(group_id, session_id))

    def list_sessions(self, group_id: str) -> list[SessionInfo]:
        return self._do(_Calls.list_sessions(group_id))

    def delete_message(self, group_id: str, session_id: str, message_id: str) -> DeletionReceipt:
        return self._do(_Calls.delete(f"{_session(group_id, session_id)}/messages/{_segment(message_id)}"))

    def delete_episode(self, group_id: str, session_id: str, episode_id: str) -> DeletionReceipt:
        return self._do(_Calls.delete(f"{_session(group_id, session_id)}/episodes/{_segment(episode_id)}"))

    def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        return self._do(_Calls.delete(_session(group_id, session_id)))

    def delete_group(self, group_id: str) -> DeletionReceipt:
        return self._do(_Calls.delete(_group(group_id)))

    def generate_summaries(
        self,
        group_id: str,
        *,
        days_back: float = 7,
        max_memories_per_summary: int = 50,
        session_id: str | None = None,
        reference_time: datetime | None = None,
    ) -> list[Episode]:
        body = {
            "days_back": days_back,
            "max_memories_per_summary": max_memories_per_summary,
            "session_id": session_id,
            "reference_time": reference_time,
        }
        return self._do(_Calls.summaries(group_id, body))

    def import_group(self, lines: Iterable[str], *, group_id: str) -> ImportReceipt:
        return self._do(_Calls.import_group(lines, group_id))

    def export_group(self, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
        params = {"include_embeddings": str(include_embeddings).lower()}
        with self._http.stream("GET", _Calls.export_path(group_id), params=params, headers=self._auth) as response:
            if response.status_code >= 400:
                response.read()
                raise error_from_response(response)
            yield from (line for line in response.iter_lines() if line)

    def ready(self) -> bool:
        return self._http.get("/readyz").status_code == 200


class AsyncEpimemClient:
    """The same operations as coroutines, on ``httpx.AsyncClient``."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._owned = http is None
        self._auth = _headers(api_key)

    async def __aenter__(self) -> AsyncEpimemClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def _do(self, call: _Call[T]) -> T:
        response = await self._http.request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            content=call.content,
            headers={**self._auth, **call.headers},
        )
        return call.parse(_check(response))

    async def add_messages(self, group_id: str, session_id: str, messages: Iterable[MessageInput]) -> AddReceipt:
        return await self._do(_Calls.add_messages(group_id, session_id, messages))

    async def flush(self, group_id: str, session_id: str) -> list[Episode]:
        return await self._do(_Calls.flush(group_id, session_id))

    async def history(self, group_id: str, session_id: str, *, limit: int = 100, offset: int = 0) -> list[Message]:
        return await self._do(_Calls.history(group_id, session_id, limit, offset))

    async def search(self, group_id: str, query: str | SearchQuery, **options: Any) -> list[SearchHit]:
        return await self._do(_Calls.search(group_id, query, options))

    async def context(self, group_id: str, query: str | ContextQuery, **options: Any) -> ContextResult:
        return await self._do(_Calls.context(group_id, query, options))

    async def timeline(self, group_id: str, **params: Any) -> TimelinePage:
        return await self._do(_Calls.timeline(group_id, params))

    async def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        return (await self._do(_Calls.get_episode(group_id, session_id, episode_id, False))).episode

    async def episode_messages(self, group_id: str, episode: Episode) -> list[Message]:
        out = await self._do(_Calls.get_episode(group_id, episode.session_id, episode.uuid, True))
        return out.messages or []

    async def put_group(self, config: GroupConfiguration) -> GroupConfiguration:
        return await self._do(_Calls.put_group(config))

    async def get_group(self, group_id: str) -> GroupConfiguration:
        return await self._do(_Calls.get_group(group_id))

    async def put_session(self, info: SessionInfo) -> SessionInfo:
        return await self._do(_Calls.put_session(info))

    async def get_session(self, group_id: str, session_id: str) -> SessionInfo:
        return await self._do(_Calls.get_session(group_id, session_id))

    async def list_sessions(self, group_id: str) -> list[SessionInfo]:
        return await self._do(_Calls.list_sessions(group_id))

    async def delete_message(self, group_id: str, session_id: str, message_id: str) -> DeletionReceipt:
        return await self._do(_Calls.delete(f"{_session(group_id, session_id)}/messages/{_segment(message_id)}"))

    async def delete_episode(self, group_id: str, session_id: str, episode_id: str) -> DeletionReceipt:
        return await self._do(_Calls.delete(f"{_session(group_id, session_id)}/episodes/{_segment(episode_id)}"))

    async def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        return await self._do(_Calls.delete(_session(group_id, session_id)))

    async def delete_group(self, group_id: str) -> DeletionReceipt:
        return await self._do(_Calls.delete(_group(group_id)))

    async def generate_summaries(
        self,
        group_id: str,
        *,
        days_back: float = 7,
        max_memories_per_summary: int = 50,
        session_id: str | None = None,
        reference_time: datetime | None = None,
    ) -> list[Episode]:
        body = {
            "days_back": days_back,
            "max_memories_per_summary": max_memories_per_summary,
            "session_id": session_id,
            "reference_time": reference_time,
        }
        return await self._do(_Calls.summaries(group_id, body))

    async def import_group(self, lines: Iterable[str], *, group_id: str) -> ImportReceipt:
        return await self._do(_Calls.import_group(lines, group_id))

    async def export_group(self, group_id: str, *, include_embeddings: bool = False) -> AsyncIterator[str]:
        params = {"include_embeddings": str(include_embeddings).lower()}
        async with self._http.stream(
            "GET", _Calls.export_path(group_id), params=params, headers=self._auth
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise error_from_response(response)
            async for line in response.aiter_lines():
                if line:
                    yield line

    async def ready(self) -> bool:
        return (await self._http.get("/readyz")).status_code == 200
