"""``python -m api.cli``: the ``epimem`` command line."""

from api.cli.entry import main

main()
