"""The two distributions as a user installs them: both wheels built from this repository, the client's
installed alone into a fresh virtual environment (its dependencies from the package index, as pip does),
where it talks to a real server, its ``epimem`` command line answers from that server, no generic top-level
package (``api``, ``memory``, ``retrieval``) exists, and the LangChain and LlamaIndex adapters install as its
extras. The server's wheel holds the service and the client, under the name ``epimem-server`` (``epimem``
on PyPI is another project)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.paths import ROOT
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from epimem_client import EpimemClient
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


def _pip_install(bin_folder: Path, *requirements: str) -> None:
    """``requirements`` installed into a virtual environment (their dependencies from the package index, as pip
    does)."""
    install = subprocess.run(
        [str(bin_folder / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[str]:
    """A real server; its group ``seed`` holds one episode about Ana's dog Rex."""
    data = tmp_path_factory.mktemp("served") / "data"
    service = Epimem.from_settings(Settings(data_dir=data), background=False, embedder=embedder)
    service.add_messages("seed", "s", [{"id": "1", "content": "Ana adopted a dog called Rex."}])
    service.flush("seed", "s")
    try:
        with AppServer(service) as server:
            yield server.url
    finally:
        service.close()


@pytest.fixture(scope="module")
def client_bin(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the client's wheel alone; its ``bin`` folder."""
    folder = tmp_path_factory.mktemp("client") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    _pip_install(folder / "bin", str(wheels["client"]))
    return folder / "bin"


@pytest.fixture(scope="module")
def adapters_bin(wheels: dict[str, Path], client_bin: Path) -> Path:
    """The same environment with the client's extras added (after the tests of the client alone, which come first
    in this file: an install of the extras takes minutes, one venv for both saves one of them)."""
    _pip_install(client_bin, f"{wheels['client']}[langchain,llamaindex]")
    return client_bin


def test_the_client_installs_alone_and_imports_nothing_generic(
    wheels: dict[str, Path], client_bin: Path, server_url: str, tmp_path: Path
) -> None:
    assert wheels["client"].name.startswith("epimem_client-")
    assert _top_level(wheels["client"]) == {"epimem_client"}
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
    # cwd outside the repository: nothing of it on the path.
    result = subprocess.run(
        [str(client_bin / "python"), "-c", code, server_url], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["not found: not_found", "True", "1 True", "[]"]


def test_the_clients_command_line_works_on_a_running_server(client_bin: Path, server_url: str, tmp_path: Path) -> None:
    def epimem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(client_bin / "epimem"), *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
            timeout=120,
        )

    said = [{"group_id": "seed", "session_id": "live", "id": "9", "content": "Rex swam in Lake Tahoe today."}]
    source = tmp_path / "messages.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in said))
    with EpimemClient(server_url) as client:
        client.add_messages("seed", "live", [{"id": "8", "content": "We are driving to the lake with Rex."}])
    page = epimem("timeline", "seed", "--json", EPIMEM_URL=server_url)
    assert page.returncode == 0, page.stderr
    assert len(json.loads(page.stdout)["pending"]) == 1  # what was just said, as its open episode
    imported = epimem("import", str(source), "--url", server_url, "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["messages"] == 1
    hits = epimem("search", "seed", "Where did Rex swim?", "--url", server_url, "--json")
    assert hits.returncode == 0 and "Tahoe" in hits.stdout
    stats = epimem("stats", "--url", server_url, "--json")
    assert "seed" in [group["group_id"] for group in json.loads(stats.stdout)["groups"]]
    exported = epimem("export", "seed", "--url", server_url)
    assert exported.returncode == 0 and json.loads(exported.stdout.splitlines()[0])["type"] == "header"
    served = epimem("serve")
    assert served.returncode == 2 and "needs the server install" in served.stderr
    local = epimem("search", "seed", "dog")
    assert local.returncode == 2 and "give --url (or EPIMEM_URL)" in local.stderr


def test_the_adapters_install_as_extras_of_the_client(adapters_bin: Path, server_url: str, tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "from epimem_client import EpimemClient\n"
        "from epimem_client.langchain import EpimemChatMessageHistory, EpimemRetriever\n"
        "from epimem_client.llamaindex import EpimemRetriever as IndexRetriever\n"
        "with EpimemClient(sys.argv[1]) as memory:\n"
        "    documents = EpimemRetriever(memory=memory, group_id='seed', k=3).invoke('Who has a dog?')\n"
        "    history = EpimemChatMessageHistory(memory=memory, group_id='seed', session_id='s')\n"
        "    nodes = IndexRetriever(memory, group_id='seed', mode='context').retrieve('Who has a dog?')\n"
        "    print(any('Rex' in d.page_content for d in documents), len(history.messages) >= 1)\n"
        "    print(any('Rex' in n.node.get_content() for n in nodes))\n"
        "generic = ('api', 'memory', 'retrieval', 'chromadb', 'torch')\n"
        "print([name for name in generic if importlib.util.find_spec(name) is not None])\n"
    )
    result = subprocess.run(
        [str(adapters_bin / "python"), "-c", code, server_url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["True True", "True", "[]"]
