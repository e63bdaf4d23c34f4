"""The two distributions as a user installs them: both wheels built from this repository, the client's
installed alone into a fresh virtual environment (its dependencies from the package index, as pip does),
where it talks to a real server and no generic top-level package (``api``, ``memory``, ``retrieval``)
exists. The server's wheel holds the service and the client, under the name ``epimem-server`` (``epimem``
on PyPI is another project)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.paths import ROOT
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

pytestmark = pytest.mark.slow

# What the server's wheel is built from: a copy, so that building leaves no build/ or *.egg-info in the tree.
SOURCES = ("pyproject.toml", "README.md", "memory", "retrieval", "api", "clients/python")


def _wheel(source: Path, out: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def _top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist() if ".dist-info/" not in name}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tree = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    for name in SOURCES:
        source, target = ROOT / name, tree / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy2(source, target)
    out = tmp_path_factory.mktemp("wheels")
    return {
        "server": _wheel(tree, out / "server"),
        "client": _wheel(tree / "clients" / "python", out / "client"),
    }


def test_the_server_wheel_is_epimem_server_and_ships_the_client(wheels: dict[str, Path]) -> None:
    wheel = wheels["server"]
    assert wheel.name.startswith("epimem_server-")
    assert _top_level(wheel) == {"api", "memory", "retrieval", "epimem_client"}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"api/explorer/ui/index.html", "epimem_client/client.py", "epimem_client/py.typed"} <= names


def test_the_client_installs_alone_and_imports_nothing_generic(
    wheels: dict[str, Path], tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    wheel = wheels["client"]
    assert wheel.name.startswith("epimem_client-")
    assert _top_level(wheel) == {"epimem_client"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    code = (
        "import importlib.util, sys\n"
        "from epimem_client import AddReceipt, EpimemClient, NotFoundError\n"
        "with EpimemClient(sys.argv[1]) as memory:\n"
        "    receipt = memory.add_messages('g', 's', [{'id': '1', 'content': 'Ana adopted a dog called Rex.'}])\n"
        "    episodes = memory.flush('g', 's')\n"
        "    hits = memory.search('g', 'Who has a dog?')\n"
        "    try:\n"
        "        memory.get_episode('g', 's', 'no-such-episode')\n"
        "    except NotFoundError as error:\n"
        "        print('not found:', error.code)\n"
        "print(receipt == AddReceipt(accepted=['1'], duplicates=[], pending=1))\n"
        "print(len(episodes), hits[0].episode.uuid == episodes[0].uuid)\n"
        "generic = ('api', 'memory', 'retrieval', 'fastapi', 'chromadb', 'torch', 'numpy', 'sentence_transformers')\n"
        "print([name for name in generic if importlib.util.find_spec(name) is not None])\n"
    )
    service = Epimem.from_settings(Settings(data_dir=tmp_path / "data"), background=False, embedder=embedder)
    try:
        with AppServer(service) as server:
            # cwd outside the repository: nothing of it on the path.
            result = subprocess.run(
                [str(python), "-c", code, server.url], capture_output=True, text=True, cwd=tmp_path, timeout=120
            )
    finally:
        service.close()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["not found: not_found", "True", "1 True", "[]"]
