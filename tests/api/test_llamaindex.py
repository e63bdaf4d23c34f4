"""LlamaIndex adapters against a real epimem server: LlamaIndex's own ``Memory`` with the epimem
block and its ``MockLLM`` (which echoes the prompt it was given), and the retriever."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.builders import seed_rex_chat
from helpers.docs_blocks import run_block
from helpers.servers import AppServer
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory

from api.facade import Epimem
from api.integrations.llamaindex import EpimemMemoryBlock, EpimemRetriever
from api.settings import Settings
from epimem_client import AsyncEpimemClient, EpimemClient
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import Role


@pytest.fixture
def url(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[str]:
    service = Epimem.from_settings(Settings(data_dir=tmp_path / "data"), background=False, embedder=embedder)
    with AppServer(service) as server:
        yield server.url
    service.close()


def test_retriever_nodes_sync_and_async(url: str) -> None:
    with EpimemClient(url) as client:
        episode_id = seed_rex_chat(client, "team-a")
        nodes = EpimemRetriever(client, group_id="team-a", k=3).retrieve("What is the dog called?")
        assert nodes and nodes[0].node.node_id == episode_id and nodes[0].score and nodes[0].score > 0
        assert "Rex" in nodes[0].node.get_content()
        assert nodes[0].node.metadata["source_message_ids"] == ["m0", "m1", "m2"]
        assert all("watercolours" not in n.node.get_content() for n in nodes)
        cited = EpimemRetriever(client, group_id="team-a", mode="context", token_budget=200).retrieve("Rex")
        assert len(cited) == 1 and cited[0].node.metadata["episode_id"] == episode_id
        assert cited[0].node.metadata["marker"] == "[1]" and "[1] " in cited[0].node.get_content()

    async def main() -> list:
        async with AsyncEpimemClient(url) as async_client:
            retriever = EpimemRetriever(client, group_id="team-a", async_memory=async_client)  # type: ignore[arg-type]
            return await retriever.aretrieve("Where does Rex walk?")

    assert "lake" in asyncio.run(main())[0].node.get_content()


def test_memory_block_stores_what_leaves_the_buffer_and_recalls_it(url: str) -> None:
    with EpimemClient(url) as client:
        block = EpimemMemoryBlock(memory=client, group_id="team-a", token_budget=300)
        memory = Memory.from_defaults(
            session_id="chat-7",
            token_limit=120,
            chat_history_token_ratio=0.5,
            token_flush_size=40,
            memory_blocks=[block],
        )
        turns = [
            (MessageRole.USER, "I adopted a golden retriever called Rex last weekend."),
            (MessageRole.ASSISTANT, "Congratulations on adopting Rex, that is wonderful news."),
            (MessageRole.USER, "Rex loves the park by the lake, we walk there every single morning now."),
            (MessageRole.ASSISTANT, "Morning walks by the lake sound like a lovely routine for the two of you."),
            (MessageRole.USER, "Unrelated: my sister Jo is moving to Lisbon in the autumn for a new job."),
            (MessageRole.ASSISTANT, "Lisbon is a beautiful city; I hope the move goes smoothly for Jo."),
        ]
        for role, text in turns:
            memory.put(ChatMessage(role=role, content=text))
        stored = client.history("team-a", "chat-7")
        assert stored, "nothing left the short-term buffer into epimem"
        assert stored[0].content == turns[0][1] and stored[0].role == Role.USER
        assert stored[1].role == Role.ASSISTANT
        # Nothing flushed, no episode formed yet: what left the buffer is recalled as pending messages.
        page = client.timeline("team-a", session_id="chat-7")
        assert page.episodes and page.pending == [e.uuid for e in page.episodes]  # the open episode only

        engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=memory)
        echoed = str(engine.chat("What is my dog called?"))  # MockLLM answers with its whole prompt
        assert "<epimem>" in echoed and "golden retriever called Rex" in echoed
        assert "Relevant memory, oldest first:" in echoed
        hits = EpimemRetriever(client, group_id="team-a").retrieve("What is my dog called?")
        assert hits and hits[0].node.metadata["pending"] is True

        again = len(client.history("team-a", "chat-7"))
        asyncio.run(block.aput([ChatMessage(role=MessageRole.USER, content=turns[0][1])], session_id="chat-7"))
        assert len(client.history("team-a", "chat-7")) == again  # the same message again: a duplicate


def test_docs_example(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with EpimemClient(url) as client:
        seed_rex_chat(client, "team-a")
    namespace = run_block(__file__, url, monkeypatch)
    assert "Rex" in namespace["prompt"]


def test_retriever_with_a_speaker_filter(url: str) -> None:
    with EpimemClient(url) as client:
        seed_rex_chat(client, "team-a")
        only = {"speakers": ["Melanie"]}
        cited = EpimemRetriever(client, group_id="team-a", mode="context", filter=only).retrieve("Rex the dog")
        text = "\n".join(n.node.get_content() for n in cited)
        assert "Melanie:" in text and "Caroline:" not in text
        assert EpimemRetriever(client, group_id="team-a", filter={"roles": ["tool"]}).retrieve("Rex") == []
