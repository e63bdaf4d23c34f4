"""LlamaIndex adapters (``pip install 'epimem-client[llamaindex]'``): a retriever and a memory block for
``llama_index.core.memory.Memory``.

    from llama_index.core.memory import Memory
    from epimem_client import EpimemClient
    from epimem_client.llamaindex import EpimemMemoryBlock, EpimemRetriever

    client = EpimemClient("http://127.0.0.1:8000")
    nodes = EpimemRetriever(client, group_id="team-a").retrieve("Who has a dog?")
    memory = Memory.from_defaults(
        session_id="chat-1", memory_blocks=[EpimemMemoryBlock(memory=client, group_id="team-a")]
    )

The block stores the messages that leave ``Memory``'s short-term buffer into an epimem session
and answers with token-budgeted, cited context for the latest message.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from epimem_client._adapters import (
    ASSISTANT,
    SYSTEM,
    TOOL,
    USER,
    Memory,
    add_new,
    citation_metadata,
    context_pieces,
    hit_metadata,
    hit_text,
    scope_options,
    stable_id,
)
from epimem_client.models import ContextResult, SearchHit

_ASSISTANT = {MessageRole.ASSISTANT, MessageRole.CHATBOT, MessageRole.MODEL}
_SYSTEM = {MessageRole.SYSTEM, MessageRole.DEVELOPER}
_TOOL = {MessageRole.TOOL, MessageRole.FUNCTION}


def _role(role: MessageRole) -> str:
    if role in _ASSISTANT:
        return ASSISTANT
    if role in _SYSTEM:
        return SYSTEM
    return TOOL if role in _TOOL else USER


def _nodes(found: list[SearchHit] | ContextResult) -> list[NodeWithScore]:
    if not isinstance(found, list):
        return [
            NodeWithScore(node=TextNode(text=text, metadata=citation_metadata(citation)), score=None)
            for text, citation in context_pieces(found)
        ]
    return [
        NodeWithScore(node=TextNode(text=hit_text(h), id_=h.episode.uuid, metadata=hit_metadata(h)), score=h.score)
        for h in found
    ]


class EpimemRetriever(BaseRetriever):
    """Episodes (``mode="episodes"``) or cited context pieces (``mode="context"``) as nodes."""

    def __init__(
        self,
        memory: Memory,
        *,
        group_id: str,
        mode: Literal["episodes", "context"] = "episodes",
        k: int = 5,
        token_budget: int = 1000,
        session_ids: list[str] | None = None,
        time: str | None = None,
        reference_time: datetime | None = None,
        async_memory: Any = None,
        filter: dict[str, Any] | None = None,  # noqa: A002 (the API's name: speakers, roles, episode_types, metadata)
    ) -> None:
        super().__init__()
        self.memory, self.async_memory, self.group_id, self.mode = memory, async_memory, group_id, mode
        scope = scope_options(session_ids, time, reference_time, filter)
        self.options = {"k": k, **scope} if mode == "episodes" else {"token_budget": token_budget, **scope}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self.memory.search if self.mode == "episodes" else self.memory.context
        return _nodes(call(self.group_id, query_bundle.query_str, **self.options))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_memory is None:
            return await asyncio.to_thread(self._retrieve, query_bundle)
        call = self.async_memory.search if self.mode == "episodes" else self.async_memory.context
        return _nodes(await call(self.group_id, query_bundle.query_str, **self.options))


class EpimemMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory for ``Memory``: what leaves the short-term buffer goes into epimem (session
    ``session_id``, or the ``Memory``'s own session id); what comes back is cited context."""

    name: str = "epimem"
    description: str | None = "Episodic long-term memory of earlier conversation, with dates."
    memory: Any = Field(description="an EpimemClient or the in-process Epimem facade")
    group_id: str
    session_id: str | None = Field(default=None, description="default: the Memory's session id")
    token_budget: int = Field(default=500, ge=16)
    flush: bool = Field(
        default=False,
        description="form episodes right away from what is put (not needed: what is put is recalled at once, and "
        "episodes form when the session goes quiet)",
    )

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        latest = next((m for m in reversed(messages or []) if m.content), None)
        if latest is None:
            return ""
        query = str(latest.content)[:10_000]
        found = await asyncio.to_thread(self.memory.context, self.group_id, query, token_budget=self.token_budget)
        return str(found.text)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        by_session: dict[str, list[dict[str, Any]]] = {}
        for position, message in enumerate(messages):
            session = self.session_id or str(message.additional_kwargs.get("session_id") or "default")
            content = str(message.content or "").strip()
            if not content:
                continue
            role = _role(message.role)
            entry: dict[str, Any] = {"id": stable_id(session, role, content, position), "role": role}
            entry["content"] = content
            by_session.setdefault(session, []).append(entry)
        for session, batch in by_session.items():
            await asyncio.to_thread(self._store, session, batch)

    def _store(self, session: str, batch: list[dict[str, Any]]) -> None:
        add_new(self.memory, self.group_id, session, batch)
        if self.flush:
            self.memory.flush(self.group_id, session)
