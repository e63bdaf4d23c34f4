"""HTTP clients for an epimem server, with the Python facade's method names.

    from epimem_client import EpimemClient
    with EpimemClient("http://127.0.0.1:8000", api_key=None) as memory:
        memory.add_messages("team", "chat-1", [{"id": "1", "content": "Ana adopted a dog called Rex."}])
        hits = memory.search("team", "Who has a dog?")

``AsyncEpimemClient`` has the same methods as coroutines; the operator's calls (retention, webhooks) are
``epimem_client.operations``. Each operation is described once (a
``Call``: request + parser); the two clients only differ in how they send it. Results are the wire
models of ``epimem_client.models``; errors are the ``epimem_client.errors`` classes, and a server that
cannot be reached raises ``ServerUnreachableError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Generic, TypeVar, Unpack

import httpx
from pydantic import BaseModel

from epimem_client._calls import Call, Calls, MessageInput, SummaryOptions, error_from_response, tls, unreachable
from epimem_client.errors import NotFoundError
from epimem_client.models import (
    AddReceipt,
    AuditPage,
    ContextResult,
    DeletionReceipt,
    Episode,
    GroupConfiguration,
    GroupStats,
    ImportReceipt,
    Message,
    MessagePage,
    RedactionReceipt,
    Revision,
    SearchHit,
    SessionInfo,
    TimelinePage,
)
from epimem_client.operations import AsyncOperations, Operations

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8000"


def _headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise error_from_response(response)
    return response


H = TypeVar("H", httpx.Client, httpx.AsyncClient)


class _Client(Generic[H]):
    """What the two clients share: the HTTP client (owned, or passed in as ``http``: your own httpx
    client or a FastAPI TestClient), the key, how a call is sent."""

    _http_class: type[H]

    def __init__(
        self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float = 120.0, http: H | None = None
    ) -> None:
        self._http: H = http or self._http_class(base_url=base_url, timeout=timeout, verify=tls())
        self._owned = http is None
        self._auth = _headers(api_key)

    def _request(self, call: Call[Any]) -> dict[str, Any]:
        """``httpx`` request arguments of a call."""
        return {
            "method": call.method,
            "url": call.path,
            "params": call.params,
            "json": call.json,
            "content": call.content,
            "headers": {**self._auth, **call.headers},
        }


class EpimemClient(_Client[httpx.Client], Operations):
    """Synchronous client: ``EpimemClient(base_url, api_key=..., timeout=..., http=...)``."""

    _http_class = httpx.Client

    def __enter__(self) -> EpimemClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def _do(self, call: Call[T]) -> T:
        try:
            response = self._http.request(**self._request(call))
        except httpx.TransportError as error:
            raise unreachable(self._http.base_url, error) from error
        return call.parse(_check(response))

    # -- the facade's operations ------------------------------------------------------------------

    def add_messages(self, group_id: str, session_id: str, messages: Iterable[MessageInput]) -> AddReceipt:
        return self._do(Calls.add_messages(group_id, session_id, messages))

    def flush(self, group_id: str, session_id: str) -> list[Episode]:
        return self._do(Calls.flush(group_id, session_id))

    def get_message(self, group_id: str, session_id: str, message_id: str) -> Message:
        """One message as stored, whole (a citation's excerpt is a span of its content)."""
        return self._do(Calls.get_message(group_id, session_id, message_id))

    def history(self, group_id: str, session_id: str, *, limit: int = 100, cursor: str | None = None) -> MessagePage:
        """A page of the session's messages in event-time order, with ``next_cursor`` (None on the last page)."""
        return self._do(Calls.history(group_id, session_id, limit, cursor))

    def search(self, group_id: str, query: str | BaseModel, **options: Any) -> list[SearchHit]:
        return self._do(Calls.search(group_id, query, options))

    def context(self, group_id: str, query: str | BaseModel, **options: Any) -> ContextResult:
        return self._do(Calls.context(group_id, query, options))

    def timeline(self, group_id: str, **params: Any) -> TimelinePage:
        """``session_id``, ``start``, ``end``, ``limit``, ``cursor``, ``order`` as in the facade."""
        return self._do(Calls.timeline(group_id, params))

    def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        return self._do(Calls.get_episode(group_id, session_id, episode_id, False)).episode

    def episode_messages(self, group_id: str, episode: Episode) -> list[Message]:
        out = self._do(Calls.get_episode(group_id, episode.session_id, episode.uuid, True))
        return out.messages or []

    def put_group(self, config: BaseModel) -> GroupConfiguration:
        return self._do(Calls.put_group(config))

    def get_group(self, group_id: str) -> GroupConfiguration:
        return self._do(Calls.get_group(group_id))

    def put_session(self, info: BaseModel) -> SessionInfo:
        return self._do(Calls.put_session(info))

    def get_session(self, group_id: str, session_id: str) -> SessionInfo:
        return self._do(Calls.get_session(group_id, session_id))

    def list_sessions(self, group_id: str) -> list[SessionInfo]:
        return self._do(Calls.list_sessions(group_id))

    def delete_message(self, group_id: str, session_id: str, message_id: str) -> DeletionReceipt:
        return self._do(Calls.delete_message(group_id, session_id, message_id))

    def delete_episode(self, group_id: str, session_id: str, episode_id: str) -> DeletionReceipt:
        return self._do(Calls.delete_episode(group_id, session_id, episode_id))

    def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        return self._do(Calls.delete_session(group_id, session_id))

    def delete_group(self, group_id: str) -> DeletionReceipt:
        return self._do(Calls.delete_group(group_id))

    def generate_summaries(self, group_id: str, **options: Unpack[SummaryOptions]) -> list[Episode]:
        """``days_back`` (7), ``max_memories_per_summary`` (50), ``session_id``, ``reference_time``."""
        return self._do(Calls.summaries(group_id, **options))

    def import_group(self, lines: Iterable[str], *, group_id: str) -> ImportReceipt:
        return self._do(Calls.import_group(lines, group_id))

    def export_group(self, group_id: str, *, include_embeddings: bool = False) -> Iterator[str]:
        call = Calls.export(group_id, include_embeddings)
        try:
            with self._http.stream(call.method, call.path, params=call.params, headers=self._auth) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from_response(response)
                yield from (line for line in response.iter_lines() if line)
        except httpx.TransportError as error:
            raise unreachable(self._http.base_url, error) from error

    # -- correcting memory -------------------------------------------------------------------------

    def correct_episode(
        self,
        group_id: str,
        session_id: str,
        episode_id: str,
        *,
        title: str | None = None,
        content: str | None = None,
        user_metadata: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> Episode:
        changes = {"title": title, "content": content, "user_metadata": user_metadata, "reason": reason}
        return self._do(Calls.correct_episode(group_id, session_id, episode_id, changes))

    def episode_revisions(self, group_id: str, session_id: str, episode_id: str) -> list[Revision]:
        return self._do(Calls.episode_revisions(group_id, session_id, episode_id))  # type: ignore[no-any-return]

    def redact_message(
        self, group_id: str, session_id: str, message_id: str, *, replacement: str | None = None
    ) -> RedactionReceipt:
        return self._do(Calls.redact_message(group_id, session_id, message_id, replacement))

    def audit(self, group_id: str, *, limit: int = 50, cursor: str | None = None) -> AuditPage:
        return self._do(Calls.audit(group_id, limit, cursor))

    def ready(self) -> bool:
        """Whether the server answers and is ready; ``False`` when none answers."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    # -- groups, as the command line lists them ----------------------------------------------------

    def list_groups(self) -> list[str]:
        """The ids of the groups the key can read, sorted."""
        found: list[str] = []
        cursor: str | None = None
        while True:
            page = self._do(Calls.groups(cursor))
            found += [group.group_id for group in page.groups]
            if (cursor := page.next_cursor) is None:
                return found

    def group_exists(self, group_id: str) -> bool:
        """Whether anything names the group (its configuration or a session)."""
        try:
            self.get_group(group_id)
        except NotFoundError:
            return False
        return True

    def group_stats(self, group_id: str) -> GroupStats:
        """What a group holds: sessions, messages, episodes, pending messages, its time span."""
        return self._do(Calls.group_stats(group_id))


class AsyncEpimemClient(_Client[httpx.AsyncClient], AsyncOperations):
    """The same operations as coroutines, on ``httpx.AsyncClient``."""

    _http_class = httpx.AsyncClient

    async def __aenter__(self) -> AsyncEpimemClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def _do(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(**self._request(call))
        except httpx.TransportError as error:
            raise unreachable(self._http.base_url, error) from error
        return call.parse(_check(response))

    async def add_messages(self, group_id: str, session_id: str, messages: Iterable[MessageInput]) -> AddReceipt:
        return await self._do(Calls.add_messages(group_id, session_id, messages))

    async def flush(self, group_id: str, session_id: str) -> list[Episode]:
        return await self._do(Calls.flush(group_id, session_id))

    async def get_message(self, group_id: str, session_id: str, message_id: str) -> Message:
        return await self._do(Calls.get_message(group_id, session_id, message_id))

    async def history(
        self, group_id: str, session_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> MessagePage:
        return await self._do(Calls.history(group_id, session_id, limit, cursor))

    async def search(self, group_id: str, query: str | BaseModel, **options: Any) -> list[SearchHit]:
        return await self._do(Calls.search(group_id, query, options))

    async def context(self, group_id: str, query: str | BaseModel, **options: Any) -> ContextResult:
        return await self._do(Calls.context(group_id, query, options))

    async def timeline(self, group_id: str, **params: Any) -> TimelinePage:
        return await self._do(Calls.timeline(group_id, params))

    async def get_episode(self, group_id: str, session_id: str, episode_id: str) -> Episode:
        return (await self._do(Calls.get_episode(group_id, session_id, episode_id, False))).episode

    async def episode_messages(self, group_id: str, episode: Episode) -> list[Message]:
        out = await self._do(Calls.get_episode(group_id, episode.session_id, episode.uuid, True))
        return out.messages or []

    async def put_group(self, config: BaseModel) -> GroupConfiguration:
        return await self._do(Calls.put_group(config))

    async def get_group(self, group_id: str) -> GroupConfiguration:
        return await self._do(Calls.get_group(group_id))

    async def put_session(self, info: BaseModel) -> SessionInfo:
        return await self._do(Calls.put_session(info))

    async def get_session(self, group_id: str, session_id: str) -> SessionInfo:
        return await self._do(Calls.get_session(group_id, session_id))

    async def list_sessions(self, group_id: str) -> list[SessionInfo]:
        return await self._do(Calls.list_sessions(group_id))

    async def delete_message(self, group_id: str, session_id: str, message_id: str) -> DeletionReceipt:
        return await self._do(Calls.delete_message(group_id, session_id, message_id))

    async def delete_episode(self, group_id: str, session_id: str, episode_id: str) -> DeletionReceipt:
        return await self._do(Calls.delete_episode(group_id, session_id, episode_id))

    async def delete_session(self, group_id: str, session_id: str) -> DeletionReceipt:
        return await self._do(Calls.delete_session(group_id, session_id))

    async def delete_group(self, group_id: str) -> DeletionReceipt:
        return await self._do(Calls.delete_group(group_id))

    # -- correcting memory -------------------------------------------------------------------------

    async def correct_episode(
        self,
        group_id: str,
        session_id: str,
        episode_id: str,
        *,
        title: str | None = None,
        content: str | None = None,
        user_metadata: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> Episode:
        changes = {"title": title, "content": content, "user_metadata": user_metadata, "reason": reason}
        return await self._do(Calls.correct_episode(group_id, session_id, episode_id, changes))

    async def episode_revisions(self, group_id: str, session_id: str, episode_id: str) -> list[Revision]:
        return await self._do(Calls.episode_revisions(group_id, session_id, episode_id))  # type: ignore[no-any-return]

    async def redact_message(
        self, group_id: str, session_id: str, message_id: str, *, replacement: str | None = None
    ) -> RedactionReceipt:
        return await self._do(Calls.redact_message(group_id, session_id, message_id, replacement))

    async def audit(self, group_id: str, *, limit: int = 50, cursor: str | None = None) -> AuditPage:
        return await self._do(Calls.audit(group_id, limit, cursor))

    async def generate_summaries(self, group_id: str, **options: Unpack[SummaryOptions]) -> list[Episode]:
        """``days_back`` (7), ``max_memories_per_summary`` (50), ``session_id``, ``reference_time``."""
        return await self._do(Calls.summaries(group_id, **options))

    async def import_group(self, lines: Iterable[str], *, group_id: str) -> ImportReceipt:
        return await self._do(Calls.import_group(lines, group_id))

    async def export_group(self, group_id: str, *, include_embeddings: bool = False) -> AsyncIterator[str]:
        call = Calls.export(group_id, include_embeddings)
        try:
            async with self._http.stream(call.method, call.path, params=call.params, headers=self._auth) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_response(response)
                async for line in response.aiter_lines():
                    if line:
                        yield line
        except httpx.TransportError as error:
            raise unreachable(self._http.base_url, error) from error

    async def ready(self) -> bool:
        try:
            return (await self._http.get("/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    # -- groups, as the command line lists them ----------------------------------------------------

    async def list_groups(self) -> list[str]:
        found: list[str] = []
        cursor: str | None = None
        while True:
            page = await self._do(Calls.groups(cursor))
            found += [group.group_id for group in page.groups]
            if (cursor := page.next_cursor) is None:
                return found

    async def group_exists(self, group_id: str) -> bool:
        try:
            await self.get_group(group_id)
        except NotFoundError:
            return False
        return True

    async def group_stats(self, group_id: str) -> GroupStats:
        return await self._do(Calls.group_stats(group_id))
