"""Adapters for agent frameworks, each an optional extra: ``langchain`` (``epimem-server[langchain]``) and
``llamaindex`` (``epimem-server[llamaindex]``). They work over the HTTP client (``epimem_client``) or the
in-process facade (``api.facade.Epimem``): anything with their method names."""
