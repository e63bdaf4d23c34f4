"""Shared fixtures: the real bundled model (loaded once), real Chroma (embedded and a real
`chroma run` server), services built through the composition root, real uvicorn servers of their apps.
Shared helpers (builders, checks, servers, paths) are in tests/helpers/."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from helpers.servers import AppServer, ChromaServer  # noqa: E402

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
        # The Chroma server runs of every storage test belong to the whole command, not to the quick loop
        # (`pytest -m "not slow"` keeps the embedded runs).
        params = [pytest.param(b, marks=pytest.mark.slow) if b == "server" else b for b in chosen]
        metafunc.parametrize("backend", params, scope="session")


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


@pytest.fixture
def serve() -> Iterator[Callable[..., AppServer]]:
    """``serve(service_or_app, host=..., settings=...)``: the app on a real uvicorn server in a thread, listening
    and past its startup recovery; every server is stopped after the test."""
    servers: list[AppServer] = []

    def start(target: Any, **options: Any) -> AppServer:
        servers.append(AppServer(target, **options))
        return servers[-1].start()

    yield start
    for server in servers:
        server.stop()
