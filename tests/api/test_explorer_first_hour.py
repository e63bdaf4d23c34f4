"""The explorer as a new user meets it, on the README's quickstart data (headless Chromium, Debian's): a
group that does not exist (or a malformed address) replaces the view instead of leaving the previous one
under the message; the context slider sends the budget it shows; the timeline's own example of a time
window, with its default "count back from the last activity", finds the quickstart's episodes; and a session
nobody flushed is on the timeline as it was said, marked pending."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.browser import ARGS, chromium_or_skip
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

# The README's quickstart: two sessions, four days apart.
QUICKSTART = {
    "chat-1": [
        ("1", "Caroline", "2023-05-08T13:56:00Z", "I adopted a dog called Rex yesterday."),
        ("2", "Melanie", "2023-05-08T13:57:00Z", "Lovely! You should take Rex hiking at Lake Tahoe."),
    ],
    "chat-2": [
        ("3", "Caroline", "2023-05-12T18:00:00Z", "Rex ate my sandwich at the lake today."),
        ("4", "Melanie", "2023-05-12T18:01:00Z", "Ha! Rex clearly loves Lake Tahoe."),
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("explorer-first-hour") / "data")
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    for session, said in QUICKSTART.items():
        batch = [{"id": i, "producer_id": who, "timestamp": when, "content": text} for i, who, when, text in said]
        service.add_messages("team-a", session, batch)
        service.flush("team-a", session)
        service.add_messages("team-live", session, batch)  # as an application sends them: never flushed
    try:
        with AppServer(service) as running:
            yield running
    finally:
        service.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == []


def visit(page: Any, url: str) -> None:
    """Go to a view and wait until the explorer rendered it (polled from here: the explorer's content policy
    refuses the string evaluation ``page.wait_for_function`` polls with)."""
    page.goto(url)
    deadline = time.monotonic() + 30
    while not page.evaluate("document.body.dataset.rendered === location.hash"):
        assert time.monotonic() < deadline, "the view did not render"
        page.wait_for_timeout(50)


def test_an_unknown_group_or_a_malformed_address_replaces_the_view(server: AppServer, page: Any) -> None:
    visit(page, server.url + "/ui/#/g/team-a")
    assert page.locator("tr[data-session='chat-1']").count() == 1
    visit(page, server.url + "/ui/#/g/nope")
    assert "Not found" in page.locator("#banner").inner_text()
    assert page.locator("tr[data-session]").count() == 0  # team-a's sessions are gone
    assert page.get_by_text("Nothing to show here.").is_visible()

    visit(page, server.url + "/ui/#/g/team-a")
    visit(page, server.url + "/ui/#/g/%E0%A4%A")
    assert page.locator("tr[data-session]").count() == 0
    assert page.get_by_text("There is no such page.").is_visible()


def test_the_sessions_show_who_spoke_when_no_people_are_declared(server: AppServer, page: Any) -> None:
    visit(page, server.url + "/ui/#/g/team-a")
    headers = page.locator("table thead th").evaluate_all("nodes => nodes.map(n => n.textContent)")
    cells = page.locator("tr[data-session='chat-2'] td").all_inner_texts()
    assert cells[headers.index("People") - 1] == "Caroline, Melanie"  # the row's header cell is a th


def test_the_context_slider_sends_the_budget_it_shows(server: AppServer, page: Any) -> None:
    visit(page, server.url + "/ui/#/g/team-a/context")
    shown = page.locator("#c-budget-value").inner_text()
    page.get_by_label("Question").fill("Where could Rex go?")
    with page.expect_request(lambda request: request.url.endswith("/context")) as sent:
        page.get_by_role("button", name="Build context").click()
    budget = json.loads(sent.value.post_data)["token_budget"]
    assert shown == f"{budget} tokens" == "300 tokens"
    for value in ("64", "1000", "2000", "16"):
        page.get_by_label("Token budget").fill(value)
        assert page.locator("#c-budget-value").inner_text() == f"{value} tokens"


def test_the_timelines_own_example_finds_the_quickstart(server: AppServer, page: Any) -> None:
    visit(page, server.url + "/ui/#/g/team-a/timeline")
    page.wait_for_selector("body[data-timeline-ready]")
    box = page.get_by_role("textbox", name="Time")
    example = box.get_attribute("placeholder").removeprefix("e.g. ").split(",")[0].strip()
    assert page.locator("#tl-relative").is_checked()  # the default
    box.fill(example)
    page.evaluate("document.body.removeAttribute('data-timeline-ready')")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_selector("body[data-timeline-ready]")
    titles = page.locator("ol.episodes li").all_inner_texts()
    assert any("chat-2" in title for title in titles), (example, titles)


def test_what_was_just_said_is_on_the_timeline_marked_pending(server: AppServer, page: Any) -> None:
    visit(page, server.url + "/ui/#/g/team-live/timeline")
    page.wait_for_selector("body[data-timeline-ready]")
    items = page.locator("ol.episodes li")
    assert items.count() == 2  # one open episode per session
    assert page.locator("ol.episodes li.pending .badge").all_inner_texts() == ["pending", "pending"]
    assert "Rex" in items.first.inner_text() and "not in an episode yet" in items.first.inner_text()
    assert page.get_by_text("Nothing said yet.").count() == 0
    items.first.locator("a").click()  # the open episode's own view, with its messages
    page.wait_for_selector("#pending-note")
    assert "I adopted a dog called Rex yesterday." in page.locator("main").inner_text()
