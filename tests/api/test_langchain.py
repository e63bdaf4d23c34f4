"""LangChain adapters against a real epimem server (uvicorn) and the in-process facade, inside real
LCEL chains with langchain-core's own fake chat model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from helpers.builders import T0, seed_rex_chat
from helpers.docs_blocks import run_block
from helpers.servers import AppServer
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.runnables.history import RunnableWithMessageHistory

from api.facade import Epimem
from api.settings import Settings
from epimem_client import AsyncEpimemClient, EpimemClient
from epimem_client.langchain import EpimemChatMessageHistory, EpimemRetriever
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import Role


@pytest.fixture
def service(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[Epimem]:
    service = Epimem.from_settings(Settings(data_dir=tmp_path / "data"), background=False, embedder=embedder)
    yield service
    service.close()


@pytest.fixture
def url(service: Epimem) -> Iterator[str]:
    with AppServer(service) as server:
        yield server.url


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


def test_retriever_in_an_lcel_chain_over_http(url: str) -> None:
    with EpimemClient(url) as memory:
        episode_id = seed_rex_chat(memory, "team-a")
        retriever = EpimemRetriever(memory=memory, group_id="team-a", k=3)
        docs = retriever.invoke("What is the dog called?")
        assert docs and "Rex" in docs[0].page_content
        meta = docs[0].metadata
        assert meta["episode_id"] == episode_id and meta["session_id"] == "chat-1"
        assert meta["source_message_ids"] == ["m0", "m1", "m2"] and meta["score"] > 0
        assert datetime.fromisoformat(meta["timestamp"]) >= T0
        assert all("watercolours" not in d.page_content for d in docs)  # never another group

        prompt = ChatPromptTemplate.from_messages(
            [("system", "Answer from memory:\n{context}"), ("human", "{question}")]
        )
        model = FakeListChatModel(responses=["The dog is called Rex."])
        chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt
        rendered = chain.invoke("What is the dog called?").to_messages()
        assert "golden retriever called Rex" in rendered[0].content
        assert (chain | model | StrOutputParser()).invoke("What is the dog called?") == "The dog is called Rex."

        cited = EpimemRetriever(memory=memory, group_id="team-a", mode="context", token_budget=200)
        pieces = cited.invoke("Rex the dog")
        assert len(pieces) == 1 and "Caroline: I adopted a golden retriever" in pieces[0].page_content
        assert pieces[0].metadata["episode_id"] == episode_id
        assert pieces[0].metadata["marker"] == "[1]" and "\n[1] Caroline: " in pieces[0].page_content
        assert pieces[0].metadata["source_message_ids"]

        late = EpimemRetriever(memory=memory, group_id="team-a", time="last week", reference_time=T0)
        assert late.invoke("Rex") == []  # the conversation is after the window


def test_async_path_uses_the_async_client(url: str) -> None:
    with EpimemClient(url) as memory:
        seed_rex_chat(memory, "team-a")

    async def main() -> list[Document]:
        async with AsyncEpimemClient(url) as async_memory:
            retriever = EpimemRetriever(memory=None, async_memory=async_memory, group_id="team-a")
            return await retriever.ainvoke("Where does Rex walk?")

    docs = asyncio.run(main())
    assert docs and "lake" in docs[0].page_content


def test_retriever_over_the_in_process_facade(service: Epimem) -> None:
    seed_rex_chat(service, "team-a")
    retriever = EpimemRetriever(memory=service, group_id="team-a", session_ids=["chat-1"])
    docs = asyncio.run(retriever.ainvoke("dog"))  # no async client: LangChain's executor path
    assert docs and "Rex" in docs[0].page_content


def test_chat_history_round_trip_and_idempotence(url: str) -> None:
    with EpimemClient(url) as memory:
        history = EpimemChatMessageHistory(memory, "team-a", "chat-2")
        assert history.messages == []
        turn = [SystemMessage("Be brief."), HumanMessage("I bought a red bike.", name="ana"), AIMessage("Nice!")]
        history.add_messages(turn)
        history.add_messages(turn)  # the same messages again: nothing new is stored
        stored = memory.history("team-a", "chat-2")
        assert [m.role for m in stored] == [Role.SYSTEM, Role.USER, Role.ASSISTANT]
        assert stored[1].producer_id == "ana"
        back = history.messages
        assert [type(m) for m in back] == [SystemMessage, HumanMessage, AIMessage]
        assert [m.content for m in back] == ["Be brief.", "I bought a red bike.", "Nice!"]
        assert [m.id for m in back] == [m.id for m in stored]
        history.clear()
        assert history.messages == []


def test_runnable_with_message_history(url: str) -> None:
    with EpimemClient(url) as memory:
        prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
        model = FakeListChatModel(responses=["Hello Ana.", "You told me you bought a red bike."])
        seen: list[int] = []

        def count(value: object) -> object:
            seen.append(len(value.to_messages()))  # type: ignore[attr-defined]
            return value

        chain = RunnableWithMessageHistory(
            prompt | RunnableLambda(count) | model,
            lambda session_id: EpimemChatMessageHistory(memory, "team-a", session_id),
            input_messages_key="input",
            history_messages_key="history",
        )
        config = {"configurable": {"session_id": "chat-3"}}
        assert chain.invoke({"input": "Hi, I am Ana."}, config=config).content == "Hello Ana."
        chain.invoke({"input": "What did I buy?"}, config=config)
        assert seen == [1, 3]  # the second call saw the first turn from epimem
        assert [m.content for m in memory.history("team-a", "chat-3")][:2] == ["Hi, I am Ana.", "Hello Ana."]


def test_docs_example(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with EpimemClient(url) as memory:
        seed_rex_chat(memory, "team-a")
    namespace = run_block(__file__, url, monkeypatch)
    assert "Rex" in namespace["answer"]


def test_retriever_with_a_speaker_filter(url: str) -> None:
    with EpimemClient(url) as client:
        seed_rex_chat(client, "team-a")
        only = {"speakers": ["Melanie"]}
        docs = EpimemRetriever(memory=client, group_id="team-a", mode="context", filter=only).invoke("Rex the dog")
        text = format_docs(docs)
        assert "Melanie:" in text and "Caroline:" not in text
        none = EpimemRetriever(memory=client, group_id="team-a", filter={"roles": ["tool"]}).invoke("Rex")
        assert none == []
