"""``epimem_client.langchain`` under its old name (the adapters ship with the thin client)."""

from epimem_client.langchain import EpimemChatMessageHistory, EpimemRetriever, to_epimem, to_langchain

__all__ = ["EpimemChatMessageHistory", "EpimemRetriever", "to_epimem", "to_langchain"]
