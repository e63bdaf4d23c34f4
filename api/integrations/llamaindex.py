"""``epimem_client.llamaindex`` under its old name (the adapters ship with the thin client)."""

from epimem_client.llamaindex import EpimemMemoryBlock, EpimemRetriever

__all__ = ["EpimemMemoryBlock", "EpimemRetriever"]
