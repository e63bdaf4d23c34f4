"""LangChain adapters (``pip install 'epimem-client[langchain]'``): a retriever and a chat message history.

    from epimem_client import EpimemClient
    from epimem_client.langchain import EpimemChatMessageHistory, EpimemRetriever

    memory = EpimemClient("http://127.0.0.1:8000")
    retriever = EpimemRetriever(memory=memory, group_id="team-a", k=5)
    docs = retriever.invoke("Who has a dog?")        # Documents: one per episode
    history = EpimemChatMessageHistory(memory=memory, group_id="team-a", session_id="chat-1")

``mode="context"`` returns the token-budgeted, cited context instead, one Document per piece.
``async_memory`` (an ``AsyncEpimemClient``) makes ``ainvoke`` truly asynchronous; without it the
sync calls run in LangChain's executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from epimem_client._adapters import (
    ASSISTANT,
    SYSTEM,
    TOOL,
    USER,
    Memory,
    add_new,
    citation_metadata,
    context_pieces,
    full_history,
    hit_metadata,
    hit_text,
    scope_options,
    stable_id,
)
from epimem_client.errors import NotFoundError
from epimem_client.models import ContextResult, Message, SearchHit

_TO_ROLE = {"human": USER, "ai": ASSISTANT, "system": SYSTEM, "tool": TOOL}


class EpimemRetriever(BaseRetriever):
    """Episodes (``mode="episodes"``) or cited context pieces (``mode="context"``) as Documents."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any = Field(description="an EpimemClient or the in-process Epimem facade")
    async_memory: Any = Field(default=None, description="an AsyncEpimemClient for the async path")
    group_id: str
    mode: Literal["episodes", "context"] = "episodes"
    k: int = 5
    token_budget: int = 1000
    session_ids: list[str] | None = None
    time: str | None = Field(default=None, description="a time window in words, e.g. 'last week'")
    reference_time: datetime | None = None
    filter: dict[str, Any] | None = Field(
        default=None,
        description='a recall filter, e.g. {"speakers": ["Caroline"]} or {"metadata": {"channel": "email"}}',
    )

    def _options(self) -> dict[str, Any]:
        scope = scope_options(self.session_ids, self.time, self.reference_time, self.filter)
        return {"k": self.k, **scope} if self.mode == "episodes" else {"token_budget": self.token_budget, **scope}

    def _documents(self, found: list[SearchHit] | ContextResult) -> list[Document]:
        if not isinstance(found, list):
            return [Document(page_content=t, metadata=citation_metadata(c)) for t, c in context_pieces(found)]
        return [Document(page_content=hit_text(hit), metadata=hit_metadata(hit)) for hit in found]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        call = self.memory.search if self.mode == "episodes" else self.memory.context
        return self._documents(call(self.group_id, query, **self._options()))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_memory is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        call = self.async_memory.search if self.mode == "episodes" else self.async_memory.context
        return self._documents(await call(self.group_id, query, **self._options()))


def to_langchain(message: Message) -> BaseMessage:
    meta = {"epimem_timestamp": message.timestamp.isoformat()}
    if message.role == ASSISTANT:
        return AIMessage(content=message.content, id=message.id, name=message.producer_id, additional_kwargs=meta)
    if message.role == SYSTEM:
        return SystemMessage(content=message.content, id=message.id, additional_kwargs=meta)
    if message.role == TOOL:
        call_id = str(message.metadata.get("tool_call_id", ""))
        return ToolMessage(content=message.content, id=message.id, tool_call_id=call_id, additional_kwargs=meta)
    return HumanMessage(content=message.content, id=message.id, name=message.producer_id, additional_kwargs=meta)


def to_epimem(message: BaseMessage, session_id: str, position: int) -> dict[str, Any]:
    """The message as epimem's JSON. No timestamp unless it came from epimem: the server stamps it
    on arrival, and a retry without one is still recognised as the same message."""
    role = _TO_ROLE.get(message.type, USER)
    content = message.content if isinstance(message.content, str) else message.text
    out: dict[str, Any] = {
        "id": message.id or stable_id(session_id, role, content, position),
        "role": role,
        "content": content,
    }
    if message.name:
        out["producer_id"] = message.name
    if isinstance(message, ToolMessage):
        out["metadata"] = {"tool_call_id": message.tool_call_id}
    if "epimem_timestamp" in message.additional_kwargs:
        out["timestamp"] = message.additional_kwargs["epimem_timestamp"]
    return out


class EpimemChatMessageHistory(BaseChatMessageHistory):
    """One epimem session as a LangChain chat history. Messages without an id get a stable one
    (same content at the same place of a batch = same id), so adding them again stores nothing."""

    def __init__(self, memory: Memory, group_id: str, session_id: str) -> None:
        self.memory = memory
        self.group_id = group_id
        self.session_id = session_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return [to_langchain(m) for m in full_history(self.memory, self.group_id, self.session_id)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        batch = [to_epimem(message, self.session_id, i) for i, message in enumerate(messages)]
        add_new(self.memory, self.group_id, self.session_id, batch)

    def clear(self) -> None:
        try:
            self.memory.delete_session(self.group_id, self.session_id)
        except NotFoundError:  # nothing stored yet: already clear
            return
