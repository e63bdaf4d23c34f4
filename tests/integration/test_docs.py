"""The documentation works as written: the site builds with ``mkdocs build --strict``, and every
``bash`` and ``python`` example of README.md and docs/*.md runs, page by page and in order, in one
temporary folder per page (the rules are in docs/development.md). A block preceded by
``<!-- tested: tests/<folder>/<file>.py -->`` is run by that test instead; ``pip install`` lines are checked
against pyproject.toml rather than run (no network in tests); ``json`` blocks must parse."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.paths import BIN, DOCS, ROOT
from helpers.processes import clean_env
from helpers.servers import ServerProcess, free_port

from api.auth import KeyRing
from api.settings import Settings

PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TESTED = re.compile(r"<!-- tested: [^>]+-->\s*$")
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
CLIENT = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
CLIENT_EXTRAS = set(CLIENT["optional-dependencies"])


@dataclass
class Block:
    language: str
    code: str
    tested_elsewhere: bool


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        found.append(Block(match.group(1), match.group(2), bool(TESTED.search(before))))
    return found


def env() -> dict[str, str]:
    return clean_env(NO_MKDOCS_2_WARNING="1", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def commands(code: str) -> list[str]:
    return [line.split("  #")[0].strip() for line in code.splitlines() if line.strip() and not line.startswith("#")]


def is_install_line(line: str) -> bool:
    return "pip install" in line or line.startswith("python3 -m venv")


def check_install_line(line: str) -> None:
    """A ``pip install`` names extras that exist and installs this project (``.``, ``-e .``, ``epimem-server``,
    ``./clients/python``) or a known package, never ``epimem``: that name on PyPI is someone else's."""
    for group in re.findall(r"(?:\.|epimem-server)\[([\w,-]+)\]", line):
        assert set(group.split(",")) <= EXTRAS, f"{line!r}: unknown extra; pyproject has {sorted(EXTRAS)}"
    for group in re.findall(r"(?:clients/python|epimem-client)\[([\w,-]+)\]", line):
        assert set(group.split(",")) <= CLIENT_EXTRAS, f"{line!r}: unknown extra of the client: {sorted(CLIENT_EXTRAS)}"
    for command in line.split("&&"):
        if "pip install" not in command:
            continue
        for word in shlex.split(command.split("pip install", 1)[1]):
            name = re.split(r"[\[=<>~!;]", word, maxsplit=1)[0]
            assert name.lower() != "epimem", f"{line!r}: 'epimem' on PyPI is another project; use epimem-server"


def serve_command(line: str) -> str | None:
    """The ``epimem serve …`` that ends a line (``pip install … && .venv/bin/epimem serve``), if any."""
    last = line.split("&&")[-1].strip()
    return last if re.match(r"^(\.venv/bin/)?epimem serve\b", last) else None


@dataclass
class PageRun:
    """One page's examples, run in order in ``folder``."""

    page: Path
    folder: Path
    port: int = field(default_factory=free_port)
    server: ServerProcess | None = None
    namespace: dict[str, object] = field(default_factory=dict)
    output: list[str] = field(default_factory=list)

    def local(self, code: str) -> str:
        code = code.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{self.port}")
        code = code.replace("localhost:8000", f"127.0.0.1:{self.port}")
        return code.replace(".venv/bin/", f"{BIN}/")

    def start_server(self, line: str) -> None:
        line = self.local(line)
        line = re.sub(r"--port \d+", f"--port {self.port}", line) if "--port" in line else f"{line} --port {self.port}"
        log = self.folder / "serve.log"
        self.server = ServerProcess(shlex.split(line), port=self.port, env=env(), log=log, cwd=self.folder)
        self.server.start(timeout=240)

    def ensure_server(self) -> None:
        """The page's own `epimem serve` (started where the page runs it), else one on a folder of its own."""
        if self.server is None:
            self.start_server("epimem serve --data-dir ./server-data")

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def bash(self, code: str) -> None:
        lines = commands(code)
        for line in lines:
            if is_install_line(line):
                check_install_line(line)
        # `epimem serve` blocks: started here, where a reader starts it, so what follows meets a running server
        # (and a folder it holds).
        serves = [command for line in lines if (command := serve_command(line))]
        if serves and all(is_install_line(line) or serve_command(line) for line in lines):
            self.stop_server()
            self.start_server(serves[-1])
            return
        if all(is_install_line(line) for line in lines):
            return
        if "localhost:8000" in code or "127.0.0.1:8000" in code:
            self.ensure_server()
        script = "\n".join(line for line in code.splitlines() if not is_install_line(line.strip()))
        script = self.local(script).replace("curl -s ", "curl -sS --fail-with-body ")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=self.folder, env=env(), capture_output=True, text=True
        )
        assert result.returncode == 0, (
            f"{self.page.name}: this bash example failed (a command to type by hand belongs in a console block; "
            f"one run by another test gets <!-- tested: tests/<folder>/<file>.py -->):\n{script}\n"
            f"{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )
        self.output.append(result.stdout)

    def python(self, code: str, capsys: pytest.CaptureFixture[str]) -> None:
        if "127.0.0.1:8000" in code:
            self.ensure_server()
        exec(compile(self.local(code), f"{self.page.name} example", "exec"), self.namespace)
        self.output.append(capsys.readouterr().out)


@pytest.fixture
def page_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PageRun]:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    run = PageRun(page=request.param, folder=tmp_path)
    try:
        yield run
    finally:
        run.stop_server()


RUNNABLE = [p for p in PAGES if any(b.language in ("bash", "python") and not b.tested_elsewhere for b in blocks(p))]

# What the pages' own examples must show, beyond running without an error.
SHOWS = {
    # The last steps: the timeline holds what was just said, as the sessions' open episodes.
    "README.md": ["Rex", "Relevant memory", '"accepted":["3","4"]', '"pending":["open-', "(pending)"],
    "quickstart.md": ["Rex", "Relevant memory", '"accepted":["3","4"]', '"pending":["open-', "(pending)"],
    "http-api.md": ['"docs":"/docs"', '"accepted":["1","2"]'],
    "cli.md": ["epimem-demo-1", "Rotterdam"],
    "jsonl.md": ["team-a", "billing"],
    "python.md": ["['1', '2', '3']", "vectors rebuilt with"],
    "correcting.md": [
        "[(0, 'generated', 'epimem'), (1, 'correction', 'local')]",
        "{'ben'}",
        "True [redacted]",
        "['redact', 'correct', 'flush', 'add']",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("page_run", RUNNABLE, ids=[p.name for p in RUNNABLE], indirect=True)
def test_page_examples_run_as_written(
    page_run: PageRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(page_run.folder)
    for block in blocks(page_run.page):
        if block.tested_elsewhere:
            continue
        if block.language == "bash":
            page_run.bash(block.code)
        elif block.language == "python":
            page_run.python(block.code, capsys)
    printed = "\n".join(page_run.output)
    for expected in SHOWS.get(page_run.page.name, []):
        assert expected in printed, f"{page_run.page.name} did not show {expected!r}:\n{printed[-3000:]}"
    if page_run.page.name in ("README.md", "quickstart.md"):
        searches = re.findall(r'\{"hits":\[(.)', printed)
        assert len(searches) == 2 and "]" not in searches, printed[-3000:]  # both searches find something


@pytest.mark.parametrize("page", ["README.md", "quickstart.md"])
def test_the_quickstart_starts_the_server_then_talks_to_it(page: str) -> None:
    """The first command a reader runs installs and starts the server (it blocks); the Python and curl steps
    that follow talk to that server, and none opens its data folder a second time."""
    found = blocks(ROOT / page if page == "README.md" else DOCS / page)
    runnable = [b for b in found if b.language in ("bash", "python") and not b.tested_elsewhere]
    serve_at = next(i for i, b in enumerate(runnable) if any(serve_command(line) for line in commands(b.code)))
    python_at = next(i for i, b in enumerate(runnable) if b.language == "python")
    curl_at = next(i for i, b in enumerate(runnable) if "curl" in b.code)
    assert serve_at < python_at < curl_at
    assert 'EpimemClient("http://127.0.0.1:8000")' in runnable[python_at].code
    assert not any("from_settings" in b.code for b in runnable[serve_at:])
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_json_blocks_parse() -> None:
    for page in PAGES:
        for block in blocks(page):
            if block.language != "json":
                continue
            try:
                json.loads(block.code)
            except json.JSONDecodeError:
                for line in block.code.splitlines():  # JSON Lines
                    if line.strip():
                        json.loads(line)


def test_the_key_file_example_is_valid(tmp_path: Path) -> None:
    (example,) = [b.code for b in blocks(DOCS / "http-api.md") if b.language == "json" and '"keys"' in b.code]
    path = tmp_path / "keys.json"
    path.write_text(example)
    ring = KeyRing.from_file(path)
    assert ring.enabled
    key = ring.find("a-long-random-secret-reader")
    assert key is not None and key.covers("proj-x") and not key.covers("team-b")


def test_install_lines_name_real_extras() -> None:
    checked = 0
    for page in PAGES:
        for block in blocks(page):
            for line in commands(block.code):
                if "pip install" in line:
                    check_install_line(line)
                    checked += 1
    assert checked >= 3
    with pytest.raises(AssertionError, match="unknown extra"):
        check_install_line("pip install -e '.[no-such-extra]'")
    with pytest.raises(AssertionError, match="unknown extra of the client"):
        check_install_line("pip install './clients/python[otel]'")
    check_install_line("pip install './clients/python[langchain,llamaindex]'")
    with pytest.raises(AssertionError, match="another project"):
        check_install_line("pip install 'epimem[mcp]'")
    with pytest.raises(AssertionError, match="another project"):
        check_install_line("python3 -m venv v && v/bin/pip install -q epimem")


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    assert "from_settings" in reference and "EpimemClient" in reference  # the API reference came from docstrings
    assert (tmp_path / "site" / "install" / "index.html").is_file()


ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)


def test_the_docs_describe_the_product_not_its_issues() -> None:
    """No page of the site (nor the README) names an issue of the tracker: the tuning history is CHANGELOG.md."""
    found = [(page.name, match.group()) for page in PAGES for match in ISSUE_NUMBER.finditer(page.read_text())]
    assert found == []
    assert ISSUE_NUMBER.search("as measured in issue 29") and ISSUE_NUMBER.search("Issue #8")


def test_the_settings_page_is_generated_from_settings() -> None:
    """docs/configuration.md lists every setting as scripts/settings_page.py writes it from api/settings.py."""
    spec = importlib.util.spec_from_file_location("settings_page", ROOT / "scripts" / "settings_page.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    current = generator.PAGE.read_text(encoding="utf-8")
    assert generator.page(current) == current, "docs/configuration.md is stale: run scripts/settings_page.py"
    assert all(f"`EPIMEM_{name.upper()}`" in current for name in Settings.model_fields)
    assert all(field.description for field in Settings.model_fields.values())
    assert generator.page(current.replace("`EPIMEM_DATA_DIR`", "`EPIMEM_DATA`")) != current.replace(
        "`EPIMEM_DATA_DIR`", "`EPIMEM_DATA`"
    )
