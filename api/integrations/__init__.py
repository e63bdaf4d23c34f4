"""Adapters for agent frameworks, each an optional extra: ``langchain`` (``epimem[langchain]``) and
``llamaindex`` (``epimem[llamaindex]``). They work over the HTTP client (``api.client``) or the
in-process facade (``api.facade.Epimem``): anything with their method names."""
