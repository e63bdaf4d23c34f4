"""The ``epimem`` command line (``api.cli.entry:main``); ``serve`` and the checks it makes before it starts."""
