"""The repository's folders, wherever a test module sits."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
DOCS = ROOT / "docs"
BENCHMARKS = TESTS / "benchmarks"
BIN = Path(sys.executable).parent  # the environment's scripts: epimem, ruff, mkdocs, chroma
