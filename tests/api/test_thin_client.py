"""The HTTP client is thin: it imports without Chroma, numpy, torch or sentence-transformers, and
it works in an interpreter that can only see the base install's packages (what
``pip install epimem`` without ``[server]`` brings)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

HEAVY = ("chromadb", "torch", "numpy", "sentence_transformers")
# The base install's packages (pyproject `dependencies`) and what they pull in.
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
        "import api.client\n"
        "from api.client import EpimemClient, AsyncEpimemClient\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    result = run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def base_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that holds only the base install's packages (links into this venv)."""
    site = tmp_path_factory.mktemp("base-site")
    for name in BASE:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (site / source.name).symlink_to(source, target_is_directory=source.is_dir())
    return site


def test_client_works_with_only_the_base_install(
    base_site: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """A real server in this process; the client in an interpreter that sees only the base packages."""
    service = Epimem.from_settings(Settings(data_dir=tmp_path / "data"), background=False, embedder=embedder)
    code = (
        "import sys, importlib.util\n"
        "from api.client import EpimemClient\n"
        "from memory.receipts import AddReceipt\n"
        "with EpimemClient(sys.argv[1]) as memory:\n"
        "    receipt = memory.add_messages('g', 's', [{'id': '1', 'content': 'Ana adopted a dog called Rex.'}])\n"
        "    episodes = memory.flush('g', 's')\n"
        "    hits = memory.search('g', 'Who has a dog?')\n"
        "    receipt_deleted = memory.delete_session('g', 's')\n"
        "print(receipt == AddReceipt(accepted=['1'], duplicates=[], pending=1))\n"
        "print(len(episodes), hits[0].episode.uuid == episodes[0].uuid, receipt_deleted.messages)\n"
        "print([m for m in ('fastapi', 'chromadb', 'torch', 'numpy') if importlib.util.find_spec(m)])\n"
    )
    try:
        with AppServer(service) as server:
            result = run(code, python_path=[base_site, ROOT], isolated=True, argv=[server.url])
    finally:
        service.close()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["True", "1 True ['1']", "[]"]


def test_command_line_without_the_server_says_what_to_install(base_site: Path) -> None:
    code = "import sys\nsys.argv = ['epimem', 'serve']\nfrom api.entry import main\nmain()\n"
    result = run(code, python_path=[base_site, ROOT], isolated=True)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("epimem: the command line is part of the server")
    assert "pip install 'epimem[server]'" in result.stderr


def test_command_line_with_the_server_runs_typer() -> None:
    code = "import sys\nsys.argv = ['epimem', '--help']\nfrom api.entry import main\nmain()\n"
    result = run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mcp" in result.stdout and "serve" in result.stdout
