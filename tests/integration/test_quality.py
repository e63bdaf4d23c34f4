"""Static checks run as part of the test command, so CI runs exactly what developers run."""

from __future__ import annotations

import subprocess

import pytest
from helpers.paths import BIN, ROOT


@pytest.mark.parametrize(
    "command",
    [
        [str(BIN / "ruff"), "check", "."],
        [str(BIN / "ruff"), "format", "--check", "."],
        [str(BIN / "mypy")],
        [str(BIN / "lint-imports")],
    ],
    ids=["ruff", "ruff-format", "mypy", "import-layers"],
)
def test_static_check(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
