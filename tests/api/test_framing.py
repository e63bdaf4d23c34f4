"""The explorer cannot be framed by another origin (clickjacking), and it works under its own
restrictive content policy: in a real headless Chromium against a real uvicorn server."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.builders import two_episode_session
from helpers.http_client import HTTP
from helpers.servers import AppServer, free_port
from test_explorer import ARGS, chromium_path

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

GROUP = "victim"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("framing") / "data")
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    two_episode_session(service, GROUP, "chat-1", day=0)
    with AppServer(service) as app_server:
        yield app_server
    service.close()


@pytest.fixture(scope="module")
def attacker(server: AppServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A page of another origin (another port) that frames the explorer's lifecycle view."""
    folder = tmp_path_factory.mktemp("attacker")
    target = f"{server.url}/ui/#/g/{GROUP}/lifecycle"
    (folder / "index.html").write_text(f'<!doctype html><title>win a prize</title><iframe src="{target}"></iframe>')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{port}/index.html"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS)
        yield launched
        launched.close()


def test_every_html_response_forbids_framing(server: AppServer) -> None:
    for path in ("/ui/", "/ui/index.html", "/docs", "/", "/v1/groups"):
        response = HTTP.get(server.url + path, timeout=30)
        policy = response.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in policy, path
        assert response.headers.get("x-frame-options") == "DENY", path
    explorer = HTTP.get(f"{server.url}/ui/", timeout=30).headers["content-security-policy"]
    assert "script-src 'self'" in explorer and "unsafe-inline" not in explorer and "style-src 'self'" in explorer


def test_another_origin_cannot_frame_the_explorer(attacker: str, browser: Any) -> None:
    page = browser.new_page()
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text) if "frame-ancestors" in message.text else None)
    page.goto(attacker)
    page.wait_for_timeout(2000)
    framed = [frame for frame in page.frames if frame is not page.main_frame]
    assert len(framed) == 1
    # The blocked frame holds Chromium's error page, not the explorer: nothing in it to click.
    assert framed[0].query_selector("#main") is None
    assert framed[0].query_selector("#confirm-ok") is None
    assert refused, "Chromium reports the refused frame"
    page.close()


def test_the_explorer_works_under_its_content_policy(server: AppServer, browser: Any) -> None:
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(f"{server.url}/ui/#/g/{GROUP}/timeline")
    page.wait_for_selector("#main .legend .swatch", timeout=60_000)
    colour = page.eval_on_selector("#main .legend .swatch", "node => getComputedStyle(node).backgroundColor")
    assert colour not in ("", "rgba(0, 0, 0, 0)"), "the swatch's colour (a style set by script) applies"
    page.goto(f"{server.url}/ui/#/groups")
    page.wait_for_selector(f"#main a[href*='{GROUP}']", timeout=60_000)
    assert problems == []
    page.close()
