"""The HTTP client is thin: ``epimem_client`` imports without Chroma, numpy, torch, sentence-transformers or
any server package (``tests/integration/test_distributions.py`` installs its wheel alone in a fresh venv),
and the command line says what to install when the server's packages are missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

HEAVY = ("chromadb", "torch", "numpy", "sentence_transformers")
# The client's dependencies (clients/python/pyproject.toml) and what they pull in, with pydantic-settings and
# dateutil (a broken server install may well have those).
BASE = (
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "dotenv",
    "dateutil",
    "six",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
    "idna",
    "certifi",
)


def run(
    code: str, *, python_path: list[Path] | None = None, isolated: bool = False, argv: list[str] | None = None
) -> subprocess.CompletedProcess:
    if python_path is not None:
        code = f"import sys; sys.path[:0] = {[str(p) for p in python_path]!r}\n" + code
    args = [sys.executable, *(["-I", "-S"] if isolated else []), "-c", code, *(argv or [])]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_client_import_pulls_in_no_server_module() -> None:
    code = (
        "import sys\n"
        "import epimem_client\n"
        "from api.client import EpimemClient, AsyncEpimemClient\n"
        "assert EpimemClient is epimem_client.EpimemClient\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('memory', 'retrieval')]\n"
        f"print(loaded, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    result = run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[] []"


@pytest.fixture(scope="module")
def base_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that holds only the client's packages (links into this venv)."""
    site = tmp_path_factory.mktemp("base-site")
    for name in BASE:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (site / source.name).symlink_to(source, target_is_directory=source.is_dir())
    return site


def test_command_line_without_the_server_says_what_to_install(base_site: Path) -> None:
    code = "import sys\nsys.argv = ['epimem', 'serve']\nfrom api.cli.entry import main\nmain()\n"
    result = run(code, python_path=[base_site, ROOT], isolated=True)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("epimem: the command line is part of the server")
    assert "pip install epimem-server" in result.stderr


def test_command_line_with_the_server_runs_typer() -> None:
    code = "import sys\nsys.argv = ['epimem', '--help']\nfrom api.cli.entry import main\nmain()\n"
    result = run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mcp" in result.stdout and "serve" in result.stdout
