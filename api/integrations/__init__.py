"""The framework adapters' old import paths. The adapters ship with the thin client, as its extras
(``pip install 'epimem-client[langchain]'`` or ``[llamaindex]``): ``epimem_client.langchain`` and
``epimem_client.llamaindex``. ``api.integrations.langchain`` and ``api.integrations.llamaindex`` re-export them,
so code written against the server install keeps working."""
