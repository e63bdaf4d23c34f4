"""What the tests share, importable from every test folder (``pythonpath`` in pyproject.toml): message
builders, store checks, real servers (in a thread and as processes), the fake OpenAI server, the tested
blocks of the docs, and the repository's paths."""
