"""The ``epimem`` command line of the thin client (``epimem_client.cli.app``): every command that reads or
writes a group, on a running epimem through ``EpimemClient``. Needs typer and rich (the client's
dependencies); importing ``epimem_client`` alone does not load it."""
