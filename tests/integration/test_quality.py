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
        pytest.param([str(BIN / "mypy")], marks=pytest.mark.slow),  # a minute on 2 cores: the whole command
        [str(BIN / "lint-imports")],
    ],
    ids=["ruff", "ruff-format", "mypy", "import-layers"],
)
def test_static_check(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


PACKAGES = ("memory", "retrieval", "api", "epimem_client")
MAX_MODULE_LINES = 400


def import_cycles() -> list[list[str]]:
    """Groups of the project's modules that import each other, directly or through others (Tarjan's strongly
    connected components over the import graph; imports inside functions and under TYPE_CHECKING count too)."""
    import grimp  # comes with import-linter

    graph = grimp.build_graph(*PACKAGES, cache_dir=None)  # the tree as it is now, not a cached graph
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles_among_the_projects_modules() -> None:
    assert import_cycles() == []


def test_no_module_is_over_400_lines() -> None:
    sources = [path for package in ("memory", "retrieval", "api") for path in (ROOT / package).rglob("*.py")]
    sources += list((ROOT / "clients" / "python" / "epimem_client").rglob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in sources if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert sources and long == {}


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md is the map: a module it does not name is a room nobody can find."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    sources = [path for package in ("memory", "retrieval", "api") for path in (ROOT / package).rglob("*.py")]
    unnamed = [
        str(p.relative_to(ROOT))
        for p in sources
        if p.name not in ("__init__.py", "__main__.py") and f"`{p.name}`" not in page
    ]
    assert sources and unnamed == []


# The only places that ask an object for an attribute by name (getattr, hasattr, setattr, delattr): each a
# declared plugin point or an object of an outside library whose shape varies. Everywhere else a typed interface
# says what is there (the read model's derived structures, for one, are ``Derivation``s registered with it).
ATTRIBUTE_PROBES = {
    "memory/embedding/lazy.py": 1,  # the lazy embedder hands what it does not define to the loaded model
    "memory/lifecycle/editing.py": 3,  # an episode's correctable fields, by their names
    "memory/lifecycle/retention.py": 1,  # a receipt's id lists, counted by their names
    "memory/llm/client.py": 6,  # an OpenAI-compatible server's reply: usage and choices may be missing
    "memory/store/bounded.py": 1,  # a chromadb collection's write method (add, upsert, update), by its name
    "memory/store/calls.py": 1,  # a thread-local flag (store calls never nest)
    "memory/store/deployment.py": 2,  # chromadb's private HTTP session, given a timeout
    "memory/store/keys.py": 1,  # a key's limits, by their names
    "memory/store/paging.py": 1,  # a collection's listing page: a bounded collection's, else Chroma's quota
    "memory/tracing.py": 3,  # what an operation's arguments and errors carry (any caller's, any exception)
    "api/http/access.py": 2,  # Starlette's app.state: the quotas, where the app was built with them
    "api/http/home.py": 1,  # Starlette routes (a mount has no path)
    "api/http/keys.py": 1,  # Starlette's app.state: the quotas, where the app was built with them
    "api/http/metrics.py": 1,  # the LLM counters' fields, by their names
    "api/http/middleware.py": 1,  # Starlette routes (a mount has no path)
    "api/http/telemetry.py": 2,  # Starlette's app.state: the settings, where the app was built with them
    "api/logs.py": 3,  # the extra fields of a log record
    "api/mcp/http.py": 1,  # the keyed service hands what it does not define to the service it wraps
    "clients/python/epimem_client/_calls.py": 1,  # a response wrapper's field, by its name
    "clients/python/epimem_client/cli/app.py": 1,  # a private hook of Typer that some versions have
    "clients/python/epimem_client/cli/groups.py": 1,  # a receipt's counts, summed by their names
}


def calls_per_module(names: set[str], folders: tuple[str, ...] = ("memory", "retrieval", "api")) -> dict[str, int]:
    """Calls of the functions (or classes) ``names`` per module of the project's packages and ``folders``, by a
    plain name or as an attribute (``module.name(...)``)."""
    import ast

    found: dict[str, int] = {}
    sources = [path for folder in folders for path in (ROOT / folder).rglob("*.py")]
    sources += list((ROOT / "clients" / "python" / "epimem_client").rglob("*.py"))
    for path in sources:
        calls = [
            node
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Name) and node.func.id in names)
                or (isinstance(node.func, ast.Attribute) and node.func.attr in names)
            )
        ]
        if calls:
            found[str(path.relative_to(ROOT))] = len(calls)
    return found


def attribute_probes() -> dict[str, int]:
    """Calls of getattr / hasattr / setattr / delattr per module of the project."""
    return calls_per_module({"getattr", "hasattr", "setattr", "delattr"})


def test_objects_are_asked_for_attributes_by_name_only_at_declared_plugin_points() -> None:
    assert attribute_probes() == ATTRIBUTE_PROBES


def settings_constructions() -> dict[str, int]:
    """Calls of ``Settings(...)`` per module of the project (tests aside)."""
    return calls_per_module({"Settings"}, ("memory", "retrieval", "api", "scripts"))


def test_settings_are_made_in_one_place() -> None:
    """One ``Settings`` per process: each entry point calls ``api.settings.load_settings`` once and passes the
    value down; no module makes one of its own."""
    assert settings_constructions() == {"api/settings.py": 2}


# Exact runs of 6 or more lines that the `duplicates` command may find inside memory, retrieval and api, each with
# why it stays; any other is a piece of code written twice, to be made one.
ALLOWED_REPEATS = {
    ("api/cli/keys.py", "api/cli/keys.py"): "two commands' option declarations (Typer reads them from signatures)",
}
LAYERS = ("memory/", "retrieval/", "api/")


def exact_repeats() -> set[tuple[str, str]]:
    """Pairs of files of memory, retrieval and api that share a run of 6+ identical lines (``duplicates``, a
    command of the developers' tool library, over the tree as it is)."""
    import shutil

    command = shutil.which("duplicates")
    if command is None:
        pytest.skip("the duplicates command is not installed here")
    result = subprocess.run(
        [command, "--most", "200", "--seconds", "300"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("incomplete", "(+"))], result.stdout[-2000:]
    found = set()
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[0].startswith("D") and parts[2] == "~" and "shape" not in parts[4:]:
            left, right = parts[1].rsplit(":", 1)[0], parts[3].rsplit(":", 1)[0]
            if left.startswith(LAYERS) and right.startswith(LAYERS):
                found.add((left, right))
    return found


def test_no_code_is_written_twice_inside_memory_retrieval_and_api() -> None:
    assert exact_repeats() <= set(ALLOWED_REPEATS)
