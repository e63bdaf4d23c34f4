"""The copy-paste examples of docs/integrations.md, run by the integration tests: every fenced
block right after ``<!-- tested: tests/test_<name>.py -->``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
_BLOCK = re.compile(r"<!-- tested: tests/(?P<file>[\w./]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)


def blocks(test_file: str, lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [m["body"] for m in _BLOCK.finditer(text) if m["file"] == test_file and m["lang"] == lang]


def run_block(name: str, url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Execute the (single) python example tested by ``tests/test_<name>.py`` against ``url``."""
    found = blocks(f"test_{name}.py", "python")
    assert len(found) == 1, f"expected one python example for test_{name}.py in {DOC}"
    monkeypatch.setenv("EPIMEM_URL", url)
    namespace: dict[str, Any] = {"__name__": f"docs_example_{name}"}
    exec(compile(found[0], f"{DOC.name}:{name}", "exec"), namespace)  # noqa: S102 - our own docs
    return namespace
