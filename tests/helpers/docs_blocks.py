"""The examples of the docs that a test runs instead of tests/integration/test_docs.py: every fenced block right
after ``<!-- tested: tests/<folder>/test_<name>.py -->``, found by the test's own path (docs/integrations.md's
copy-paste examples, unless another page is named)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import DOCS, ROOT

DOC = DOCS / "integrations.md"
_BLOCK = re.compile(r"<!-- tested: (?P<file>tests/[\w./]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)


def marker(test_file: str | Path) -> str:
    """How a doc names a test module: its path from the repository root (``tests/api/test_mcp.py``)."""
    return Path(test_file).resolve().relative_to(ROOT).as_posix()


def blocks(test_file: str | Path, lang: str, page: Path = DOC) -> list[str]:
    """The ``lang`` blocks of ``page`` marked as tested by ``test_file`` (a test's ``__file__``), in order."""
    text = page.read_text(encoding="utf-8")
    return [m["body"] for m in _BLOCK.finditer(text) if m["file"] == marker(test_file) and m["lang"] == lang]


def run_block(test_file: str | Path, url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Execute the (single) python example tested by ``test_file`` against ``url``."""
    found = blocks(test_file, "python")
    assert len(found) == 1, f"expected one python example for {marker(test_file)} in {DOC}"
    monkeypatch.setenv("EPIMEM_URL", url)
    name = Path(test_file).stem.removeprefix("test_")
    namespace: dict[str, Any] = {"__name__": f"docs_example_{name}"}
    exec(compile(found[0], f"{DOC.name}:{name}", "exec"), namespace)  # noqa: S102 - our own docs
    return namespace
