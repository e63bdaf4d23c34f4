"""Shared fixtures: the real bundled model (loaded once), real Chroma (embedded and a real
`chroma run` server behind a token-checking proxy), services built through the composition root, real
uvicorn servers of their apps. Shared helpers (builders, checks, servers, paths) are in tests/helpers/.

Every Chroma call epimem makes in the test processes is checked against Chroma Cloud's quotas
(``helpers.cloud_profile``; ``EPIMEM_CLOUD_PROFILE=0`` leaves the check out); the run ends with its tally."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # Several workers: each one (and every process it starts: servers, notebooks, benchmark scripts) computes
    # on one thread, instead of torch's thread per core in every process fighting for the same cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MEMORY_TEMP_MIN_FREE = 8 * 2**30


def _temp_in_memory() -> None:
    """The tests' temporary folders (pytest's ``tmp_path``, and with them the Chroma data of every test) on the
    machine's RAM filesystem when it has one with room (Linux ``/dev/shm``, 8 GiB free) and ``TMPDIR`` is not
    set: the same files, without the disk's flushes and inode work (about 7% of the quick loop's time on a 2-core
    VM). The folders of passing tests are removed as they pass (pyproject: ``tmp_path_retention_policy``)."""
    shm = Path("/dev/shm")
    if os.environ.get("TMPDIR") or not shm.is_dir() or not os.access(shm, os.W_OK):
        return
    free = os.statvfs(shm)
    if free.f_bavail * free.f_frsize < MEMORY_TEMP_MIN_FREE:
        return
    folder = shm / f"epimem-tests-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = str(folder)  # the workers and every process the tests start inherit it
    tempfile.tempdir = None


_temp_in_memory()

from helpers import cloud_profile  # noqa: E402
from helpers.embedders import RememberingEmbedder  # noqa: E402
from helpers.servers import AppServer, ChromaServer  # noqa: E402
from helpers.token_proxy import TEST_DATABASE, ChromaDeployment  # noqa: E402

from api.facade import Epimem  # noqa: E402
from api.settings import Settings  # noqa: E402
from memory.embedding.embedder import SentenceTransformerEmbedder  # noqa: E402

BACKENDS = ("embedded", "server")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core, and one more on a machine of up to four cores. A worker spends about a fifth
    of its time waiting (servers and scripts starting in processes of their own, installs, idle timers); on two
    cores two workers left the cores idle that long (14-15 min), three kept them busy (12.6 min)."""
    cores = len(os.sched_getaffinity(0)) if sys.platform == "linux" else (os.cpu_count() or 1)
    return cores + 1 if cores <= 4 else cores


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default=os.environ.get("EPIMEM_TEST_BACKENDS", ",".join(BACKENDS)),
        help="comma-separated Chroma backends for store tests: embedded, server",
    )


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("EPIMEM_CLOUD_PROFILE", "1") != "0":
        cloud_profile.install()


_WORKERS: list[dict[str, Any]] = []  # the cloud profile's tallies of pytest-xdist's workers
PROXIED: Counter[str] = Counter()  # requests the token proxy of the server backend forwarded and refused


def pytest_sessionfinish(session: pytest.Session) -> None:
    summary = {**cloud_profile.TALLY.summary(), "proxy": dict(PROXIED)}
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["cloud_profile"] = json.dumps(summary)
    if summary["exceeded"]:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    found = getattr(node, "workeroutput", {}).get("cloud_profile")
    if found:
        _WORKERS.append(json.loads(found))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tallies = [*_WORKERS, {**cloud_profile.TALLY.summary(), "proxy": dict(PROXIED)}]
    proxied: Counter[str] = Counter()
    for tally in tallies:
        proxied.update(tally.get("proxy", {}))
    if proxied:
        terminalreporter.write_line(
            f"token proxy of the server backend: {proxied['forwarded']} Chroma requests forwarded, "
            f"{proxied['refused']} refused"
        )
    if os.environ.get("EPIMEM_CLOUD_PROFILE", "1") == "0":
        return
    by_call: Counter[str] = Counter()
    for tally in tallies:
        by_call.update(tally["by_call"])
    exceeded = [line for tally in tallies for line in tally["exceeded"]]
    most = {kind: max(t["most_in_flight_per_collection"][kind] for t in tallies) for kind in ("read", "write")}
    terminalreporter.write_line(
        f"cloud profile: {sum(by_call.values())} Chroma calls of epimem checked against Chroma Cloud's quotas, "
        f"{len(exceeded)} over a limit; most in flight on one collection: {most['read']} reads, {most['write']} "
        f"writes; by call: {dict(sorted(by_call.items()))}"
    )
    for line in exceeded[:20]:
        terminalreporter.write_line(f"cloud profile: over a limit: {line}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        chosen = [b for b in metafunc.config.getoption("--backends").split(",") if b]
        # The Chroma server runs of every storage test belong to the whole command, not to the quick loop
        # (`pytest -m "not slow"` keeps the embedded runs).
        params = [pytest.param(b, marks=pytest.mark.slow) if b == "server" else b for b in chosen]
        metafunc.parametrize("backend", params, scope="session")


# Test files by their share of the whole run (seconds of one measured run; relative figures are what
# count). pytest-xdist hands out whole files (`--dist loadfile`) in collection order
# (`--no-loadscope-reorder`): the longest go first, so that no long file starts last and runs alone at
# the end. A file not listed costs DEFAULT_COST and keeps its place among those.
FILE_COSTS = {
    "tests/integration/test_benchmarks_short.py": 160,
    "tests/integration/test_formation_reads.py": 150,
    "tests/integration/test_retrieval_locomo.py": 140,
    "tests/integration/test_docs.py": 105,
    "tests/memory/test_concurrency.py": 95,
    "tests/memory/test_erasure.py": 80,
    "tests/integration/test_live_memory.py": 75,
    "tests/api/test_import_history.py": 75,
    "tests/memory/test_crash.py": 70,
    "tests/integration/test_open_files.py": 65,
    "tests/integration/test_notebooks.py": 80,
    "tests/memory/test_snapshot_patches.py": 55,
    "tests/integration/test_distributions.py": 50,
    "tests/api/test_explorer.py": 50,
    "tests/integration/test_scaleout.py": 50,
    "tests/integration/test_faults.py": 45,
    "tests/retrieval/test_timeline.py": 45,
    "tests/memory/test_long_records.py": 40,
    "tests/retrieval/test_read_caches.py": 40,
    "tests/integration/test_stateless_servers.py": 40,
    "tests/api/test_paging.py": 40,
    "tests/api/test_startup.py": 40,
    "tests/api/test_limits.py": 35,
    "tests/retrieval/test_context.py": 35,
    "tests/memory/test_webhooks.py": 30,
    "tests/retrieval/test_retrieval.py": 30,
    "tests/api/test_import_chunks.py": 30,
    "tests/memory/test_llm.py": 30,
    "tests/api/test_schemathesis.py": 30,
    "tests/api/test_stop_during_recovery.py": 25,
    "tests/memory/test_record_format.py": 25,
    "tests/memory/test_foundation.py": 25,
    "tests/memory/test_corrections.py": 25,
    "tests/api/test_keys.py": 25,
    "tests/memory/test_engine_restart.py": 25,
    "tests/api/test_import_fuzz.py": 25,
    "tests/api/test_mcp.py": 25,
    "tests/api/test_api.py": 25,
    "tests/memory/test_deletion.py": 25,
    "tests/memory/test_speed_paths.py": 20,
    "tests/memory/test_lifecycle.py": 20,
    "tests/memory/test_retention.py": 20,
    "tests/retrieval/test_aliases.py": 20,
    "tests/api/test_cli.py": 20,
}
DEFAULT_COST = 10


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    position = {item.nodeid: index for index, item in enumerate(items)}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(file_of(item), index)
    items.sort(key=lambda i: (-FILE_COSTS.get(file_of(i), DEFAULT_COST), first[file_of(i)], position[i.nodeid]))


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real bundled model, each text's vector computed once per worker (``RememberingEmbedder``)."""
    return RememberingEmbedder()


@pytest.fixture(scope="session")
def model_embedder() -> SentenceTransformerEmbedder:
    """The real bundled model as the service builds it, every call a forward pass: for tests of the embedder."""
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def embedded_service(
    tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[Epimem]:
    """One service on embedded Chroma for a whole test module (tests of surfaces, not of the storage backends)."""
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path_factory.mktemp("embedded")), background=False, embedder=embedder
    )
    yield service
    service.close()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chroma_deployment(
    chroma_server: ChromaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChromaDeployment]:
    """The Chroma server as the server backend's tests reach it: behind a token-checking proxy (a process),
    in a tenant and a database of their own, which the first service creates. ``EPIMEM_TEST_CHROMA_PROXY=0``:
    the server directly, default tenant and database (to measure what the proxy costs)."""
    if os.environ.get("EPIMEM_TEST_CHROMA_PROXY", "1") == "0":
        yield ChromaDeployment.direct(chroma_server.port)
        return
    deployment = ChromaDeployment.proxied(chroma_server.port, log=tmp_path_factory.mktemp("proxy") / "proxy.log")
    yield deployment
    if deployment.proxy is not None:
        PROXIED.update(deployment.proxy.counts())
    deployment.stop()


@pytest.fixture
def settings_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Settings]:
    """Settings for the backend under test; each test gets its own data folder, and on the server backend its
    own Chroma database (epimem creates it): what a server's start walks (every group of its database, for the
    recovery) is the test's own, not every group the tests before it wrote."""
    database = f"{TEST_DATABASE}-{uuid.uuid4().hex[:12]}"

    def make(**overrides: object) -> Settings:
        values: dict[str, object] = {"data_dir": tmp_path / "data"}
        if backend == "server":
            deployment: ChromaDeployment = request.getfixturevalue("chroma_deployment")
            values.update(deployment.settings(chroma_database=database))
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
