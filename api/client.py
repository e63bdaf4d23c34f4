"""The HTTP clients, kept importable here for code written before the client got its own distribution
(``epimem-client``, ``import epimem_client``): import them from ``epimem_client``."""

from epimem_client import AsyncEpimemClient, EpimemClient

__all__ = ["AsyncEpimemClient", "EpimemClient"]
