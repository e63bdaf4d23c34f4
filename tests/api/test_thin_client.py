"""The HTTP client is thin: ``epimem_client`` imports without Chroma, numpy, torch, sentence-transformers or
any server package (``tests/integration/test_distributions.py`` installs its wheel alone in a fresh venv), and
where the server's packages are missing the command line is the thin client's, which says what needs them."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT
from packaging.requirements import Requirement

HEAVY = ("chromadb", "torch", "numpy", "sentence_transformers")
# The client's dependencies (clients/python/pyproject.toml) and what they pull in, with pydantic-settings and
# dateutil (a broken server install may well have those); dateutil's own (six, or tzdata from 4.0) are read from
# its metadata.
BASE = (
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "dotenv",
    "dateutil",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
    "idna",
    "certifi",
    # the command line: typer and rich, and what they pull in
    "typer",
    "rich",
    "shellingham",
    "annotated_doc",
    "markdown_it",
    "mdurl",
    "pygments",
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


def requirements(distribution: str) -> list[str]:
    """The modules of a distribution's own requirements in this environment (its extras left out)."""
    found = []
    for line in importlib.metadata.requires(distribution) or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.append(requirement.name.lower().replace("-", "_"))
    return found


@pytest.fixture(scope="module")
def base_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that holds only the client's packages (links into this venv)."""
    site = tmp_path_factory.mktemp("base-site")
    for name in (*BASE, *requirements("python-dateutil")):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (site / source.name).symlink_to(source, target_is_directory=source.is_dir())
    return site


def test_command_line_without_the_server_is_the_thin_clients(base_site: Path) -> None:
    code = "import sys\nsys.argv = ['epimem', *sys.argv[1:]]\nfrom api.cli.entry import main\nmain()\n"
    path = [base_site, ROOT, ROOT / "clients" / "python"]
    served = run(code, python_path=path, isolated=True, argv=["serve"])
    assert served.returncode == 2 and "Traceback" not in served.stderr
    assert served.stderr.strip() == (
        "error: `epimem serve` runs epimem itself: it needs the server install: pip install epimem-server "
        "(from a clone: pip install -e .)"
    )
    searched = run(code, python_path=path, isolated=True, argv=["search", "g", "dog"])
    assert searched.returncode == 2 and searched.stderr.startswith("error: give --url (or EPIMEM_URL)")


def test_command_line_with_the_server_runs_typer() -> None:
    code = "import sys\nsys.argv = ['epimem', '--help']\nfrom api.cli.entry import main\nmain()\n"
    result = run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mcp" in result.stdout and "serve" in result.stdout


@pytest.mark.slow
def test_the_adapters_old_import_paths_are_the_thin_clients() -> None:
    code = (
        "import sys\n"
        "import api.integrations.langchain as old_chain, api.integrations.llamaindex as old_index\n"
        "import epimem_client.langchain as chain, epimem_client.llamaindex as index\n"
        "assert old_chain.EpimemRetriever is chain.EpimemRetriever\n"
        "assert old_chain.EpimemChatMessageHistory is chain.EpimemChatMessageHistory\n"
        "assert old_index.EpimemRetriever is index.EpimemRetriever\n"
        "assert old_index.EpimemMemoryBlock is index.EpimemMemoryBlock\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('memory', 'retrieval')])\n"
    )
    result = run(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"  # the adapters need nothing of the server
