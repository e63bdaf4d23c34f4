"""/docs (Swagger UI) and /redoc (ReDoc) work with no network: every script, style and icon they load comes
from the epimem server itself (fastapi-offline's assets), checked in a real headless Chromium whose requests
beyond 127.0.0.1 are refused and recorded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from helpers.browser import OFFLINE_ARGS, chromium_or_skip
from helpers.http_client import HTTP
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

# ReDoc's "API docs by Redocly" footer image: its one outside request, which it hides itself when it fails
# (onError); nothing of the page depends on it.
REDOC_FOOTER_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    data = tmp_path_factory.mktemp("docs-offline")
    service = Epimem.from_settings(Settings(data_dir=data), background=False, embedder=embedder)
    try:
        with AppServer(service) as running:
            yield running
    finally:
        service.close()


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_pages_name_only_local_assets(server: AppServer, path: str) -> None:
    page = HTTP.get(server.url + path, timeout=30)
    assert page.status_code == 200
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert assets and all(asset.startswith("/") for asset in assets), assets
    assert "cdn" not in page.text and "fonts.googleapis" not in page.text
    for asset in assets:
        assert HTTP.get(server.url + asset, timeout=30).status_code == 200, asset


def _offline_page(browser: Any, server: AppServer, outside: list[str], problems: list[str]) -> Any:
    context = browser.new_context()

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if url.startswith(("data:", "blob:")) or urlparse(url).hostname == "127.0.0.1":
            request_route.continue_()
        else:
            outside.append(url)
            request_route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda r: None if r.url == REDOC_FOOTER_LOGO else problems.append(f"failed: {r.url}"))
    return page


def test_swagger_ui_and_redoc_render_in_chromium_offline(server: AppServer, tmp_path: Path) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    outside: list[str] = []
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=OFFLINE_ARGS)
        try:
            page = _offline_page(browser, server, outside, problems)
            page.goto(server.url + "/docs")
            page.wait_for_selector(".opblock-summary-path", timeout=60_000)
            paths = page.locator(".opblock-summary-path").all_inner_texts()
            assert any("/v1/groups/{group_id}/search" in text for text in paths), paths[:10]
            page.screenshot(path=str(tmp_path / "docs.png"))

            page.goto(server.url + "/redoc")
            page.wait_for_selector("h1", timeout=60_000)
            assert page.locator("h1").first.inner_text().startswith("epimem")
            page.locator("h2", has_text="Search the episodes of a group").wait_for(timeout=30_000)
            assert page.locator("h2").count() >= 10  # one per operation
            page.screenshot(path=str(tmp_path / "redoc.png"))
        finally:
            browser.close()
    assert set(outside) <= {REDOC_FOOTER_LOGO}, outside
    assert problems == [], problems
