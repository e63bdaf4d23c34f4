"""Shared fixtures: the real bundled model (loaded once), real Chroma (embedded and a real
`chroma run` server), services built through the composition root."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from api.facade import Epimem  # noqa: E402
from api.settings import Settings  # noqa: E402
from memory.embedding.embedder import SentenceTransformerEmbedder  # noqa: E402

BACKENDS = ("embedded", "server")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default=os.environ.get("EPIMEM_TEST_BACKENDS", ",".join(BACKENDS)),
        help="comma-separated Chroma backends for store tests: embedded, server",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        chosen = [b for b in metafunc.config.getoption("--backends").split(",") if b]
        metafunc.parametrize("backend", chosen, scope="session")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def chroma_executable() -> str:
    local = Path(sys.executable).parent / "chroma"
    return str(local) if local.exists() else (shutil.which("chroma") or "chroma")


class ChromaServer:
    """A real `chroma run` process on 127.0.0.1, started and stopped by the tests."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.path.parent / f"chroma-{self.port}.log", "ab")  # noqa: SIM115 - kept open for the process
        self.process = subprocess.Popen(
            [chroma_executable(), "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"chroma run exited with {self.process.returncode}")
            time.sleep(0.1)
        raise RuntimeError("chroma run did not become ready")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def settings_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Settings]:
    """Settings for the backend under test; each test gets its own data folder."""

    def make(**overrides: object) -> Settings:
        values: dict[str, object] = {"data_dir": tmp_path / "data"}
        if backend == "server":
            server: ChromaServer = request.getfixturevalue("chroma_server")
            values.update(chroma_host="127.0.0.1", chroma_port=server.port)
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
def make_service(
    settings_for: Callable[..., Settings], embedder: SentenceTransformerEmbedder
) -> Iterator[Callable[..., Epimem]]:
    services: list[Epimem] = []

    def make(*, background: bool = False, generator: Any = None, **overrides: object) -> Epimem:
        settings = settings_for(**overrides)
        service = Epimem.from_settings(settings, background=background, embedder=embedder, generator=generator)
        services.append(service)
        return service

    yield make
    for service in services:
        service.close()


@pytest.fixture
def service(make_service: Callable[..., Epimem]) -> Epimem:
    return make_service()


@pytest.fixture
def group_id() -> str:
    """A fresh group per test: tests that share a Chroma server never see each other's data."""
    return f"group-{uuid.uuid4().hex[:12]}"
