"""The browser explorer at /ui in a real headless Chromium (Debian's, driven by Playwright) against a
real uvicorn server of the epimem app with a seeded conversation. Every test fails on a browser
console error, a page error, a failed request or an unexpected HTTP error status; every view is
checked with axe-core (no serious or critical violations) and photographed (into docs/images/ only with
EPIMEM_UPDATE_IMAGES=1).

Without chromium the tests skip, except when CI is set: then they fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import ARGS
from helpers.builders import MINUTE, T0, turns
from helpers.http_client import HTTP
from helpers.paths import DOCS
from helpers.servers import AppServer

from api.facade import Epimem
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.models import SessionInfo

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

# The pictures in docs/images are taken again only on request (EPIMEM_UPDATE_IMAGES=1): a run of the suite
# leaves the tree as it found it. Otherwise they go to a temporary folder (still taken: a page that cannot be
# photographed fails).
UPDATE_IMAGES = os.environ.get("EPIMEM_UPDATE_IMAGES") == "1"
IMAGES = DOCS / "images"
SIZE = {"width": 1280, "height": 800}
ADMIN_KEY = "explorer-admin-key-0123"
READ_KEY = "explorer-read-key-01234"

CONVERSATION = {
    # session: (title, [(start, [(speaker, text)])])
    "chat-1": (
        "Weekend plans",
        [
            (
                T0,
                [
                    ("Caroline", "I went hiking at Lake Tahoe with my dog Rex on Saturday."),
                    ("Melanie", "That sounds lovely! How long was the trail around the lake?"),
                    ("Caroline", "About twelve miles. Rex chased squirrels the whole way up the ridge."),
                    ("Melanie", "Did you camp there overnight or drive back the same evening?"),
                    ("Caroline", "We camped by the water and watched the stars with Rex asleep in the tent."),
                    ("Melanie", "I would love to join the next hiking trip with you and Rex."),
                ],
            ),
            (
                T0 + timedelta(hours=5),
                [
                    ("Melanie", "I finished painting a sunset over the ocean for the art show."),
                    ("Caroline", "Which colours did you use for the painting?"),
                    ("Melanie", "Mostly orange and violet acrylics on a large canvas."),
                    ("Caroline", "The art show opens on Friday; I will bring flowers."),
                ],
            ),
        ],
    ),
    "chat-2": (
        "Adoption and pottery",
        [
            (
                T0 + timedelta(days=9),
                [
                    ("Caroline", "I met the adoption agency today to start the paperwork for adopting a child."),
                    ("Melanie", "That is huge news! What did the agency ask you about?"),
                    ("Caroline", "They asked about my home, my work hours and references from friends."),
                    ("Melanie", "I am happy to write a reference letter for the adoption."),
                ],
            ),
            (
                T0 + timedelta(days=17),
                [
                    ("Melanie", "My pottery class made clay bowls and I glazed mine blue."),
                    ("Caroline", "Pottery sounds relaxing. Did the kiln crack any of the bowls?"),
                    ("Melanie", "One bowl cracked in the kiln but the blue one survived."),
                ],
            ),
        ],
    ),
}


def conversation_messages(session: str, prefix: str = "") -> list[dict[str, Any]]:
    return [
        message
        for block, (start, lines) in enumerate(CONVERSATION[session][1])
        for message in turns(lines, prefix=f"{prefix}{session}-{block}-", start=start, gap=2 * MINUTE, role="user")
    ]


def seed_conversation(service: Epimem, group: str) -> None:
    for session, (title, _) in CONVERSATION.items():
        service.add_messages(group, session, conversation_messages(session))
        service.put_session(
            SessionInfo(
                group_id=group,
                session_id=session,
                title=title,
                user_ids=("caroline", "melanie"),
                metadata={"app": "demo"},
            )
        )
        service.flush(group, session)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    """Local mode (no keys): the groups `demo` (read by most tests) and `trash` (deleted from)."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("explorer-local") / "data", episode_min_messages=1)
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    seed_conversation(service, "demo")
    seed_conversation(service, "trash")
    service.add_messages("live", "chat-9", conversation_messages("chat-1")[:3])  # never flushed: pending
    with AppServer(service) as server:
        yield server
    service.close()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("explorer-keyed")
    keys = [
        {"key": ADMIN_KEY, "groups": ["*"], "role": "admin"},
        {"key": READ_KEY, "groups": ["demo"], "role": "read"},
    ]
    (folder / "keys.json").write_text(json.dumps({"keys": keys}))
    settings = Settings(data_dir=folder / "data", api_keys_file=folder / "keys.json")
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    seed_conversation(service, "demo")
    seed_conversation(service, "secret")
    with AppServer(service) as server:
        yield server
    service.close()


def chromium_path() -> str | None:
    found = os.environ.get("EPIMEM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    return found if found and Path(found).exists() else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed, and CI is set: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium); the explorer's browser tests need it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS)
        yield launched
        launched.close()


@dataclass
class Watch:
    """Everything that went wrong in the page; statuses in `allowed` are expected by the test."""

    problems: list[str] = field(default_factory=list)
    allowed: set[int] = field(default_factory=set)
    transferred: list[tuple[str, int]] = field(default_factory=list)

    def console(self, message: Any) -> None:
        if message.type != "error":
            return
        found = re.search(r"status of (\d{3})", message.text)
        if found and int(found.group(1)) in self.allowed:
            return
        self.problems.append(f"console error: {message.text}")

    def response(self, response: Any) -> None:
        if response.status >= 400 and response.status not in self.allowed:
            self.problems.append(f"HTTP {response.status} {response.request.method} {response.url}")

    def finished(self, request: Any) -> None:
        if request.url.startswith("http"):
            sizes = request.sizes()
            self.transferred.append((request.url, sizes["responseBodySize"] + sizes["responseHeadersSize"]))


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[..., tuple[Any, Watch]]]:
    contexts: list[tuple[Any, Watch]] = []

    def make(url: str, *, viewport: dict[str, int] | None = None, allowed: set[int] | None = None) -> tuple[Any, Watch]:
        context = browser.new_context(viewport=viewport or SIZE, accept_downloads=True)
        page = context.new_page()
        watch = Watch(allowed=set(allowed or ()))
        page.on("console", watch.console)
        page.on("pageerror", lambda error: watch.problems.append(f"page error: {error}"))
        page.on("requestfailed", lambda request: watch.problems.append(f"failed: {request.url} {request.failure}"))
        page.on("response", watch.response)
        page.on("requestfinished", watch.finished)
        contexts.append((context, watch))
        page.goto(url)
        return page, watch

    yield make
    for context, watch in contexts:
        context.close()
        assert watch.problems == [], watch.problems


def accessible(page: Any) -> None:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert bad == [], [(v["id"], v["help"], [n["target"] for n in v["nodes"]][:3]) for v in bad]


@pytest.fixture(scope="module", autouse=True)
def pictures(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where ``shoot`` writes: docs/images on request, else pytest's own temporary folder."""
    global IMAGES
    if not UPDATE_IMAGES:
        IMAGES = tmp_path_factory.mktemp("explorer-shots")


def shoot(page: Any, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / f"explorer-{name}.png"))


def wait_until(page: Any, expression: str, timeout_s: float = 30.0) -> None:
    """``page.wait_for_function`` without its in-page polling, which evaluates a string: the
    explorer's content policy (no 'unsafe-eval') refuses that, as it should."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        page.wait_for_timeout(50)


def visit(page: Any, url: str) -> None:
    """Go to a view and wait until the explorer has rendered it."""
    page.goto(url)
    wait_until(page, "document.body.dataset.rendered === location.hash")


def redrawn(page: Any, action: Callable[[], object]) -> None:
    """Do something that redraws the timeline, and wait until it has."""
    page.evaluate("document.body.removeAttribute('data-timeline-ready')")
    action()
    page.wait_for_selector("body[data-timeline-ready]")


# -- views ----------------------------------------------------------------------------------------


def test_groups_view_first_load_is_light_and_lists_counts(local: AppServer, open_page: Callable) -> None:
    page, watch = open_page(local.url + "/ui/")
    row = page.get_by_role("row", name=re.compile("demo"))
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[:2] == ["2", "17"] and int(cells[2]) >= 4  # sessions, messages, episodes
    assert "2023-05-08 13:00 UTC" in cells[3]
    page.wait_for_load_state("networkidle")
    total = sum(size for _, size in watch.transferred)
    print(f"\nfirst load of /ui: {len(watch.transferred)} requests, {total} bytes")
    assert all(url.startswith(local.url) for url, _ in watch.transferred)  # nothing from elsewhere
    assert total < 80_000
    assert page.get_by_text("local mode").is_visible()
    accessible(page)
    shoot(page, "groups")


def test_sessions_view_shows_titles_counts_and_metadata(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/demo")
    page.get_by_role("row", name=re.compile("Weekend plans")).wait_for()
    first = page.locator("tr[data-session='chat-1'] td").all_inner_texts()
    assert first[0] == "10" and int(first[1]) >= 2 and first[2] == "0"  # every message in an episode
    assert "caroline, melanie" in first[5] and '{"app":"demo"}' in first[6]
    assert "2023-05-25" in page.locator("tr[data-session='chat-2'] td").nth(4).inner_text()
    accessible(page)
    shoot(page, "sessions")


def test_a_sessions_open_stretch_is_shown_as_such(local: AppServer, open_page: Callable) -> None:
    """Messages not in an episode yet: counted per session, linked to the open stretch, which reads as one."""
    page, _ = open_page(local.url + "/ui/#/g/live")
    row = page.locator("tr[data-session='chat-9']")
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == "3" and cells[1] == "0" and cells[2] == "3"
    accessible(page)
    row.locator("a.pending-link").click()
    page.locator("#pending-note").wait_for()
    assert "not an episode yet" in page.locator("#pending-note").inner_text()
    assert page.locator("h1").first.inner_text().startswith("Not yet an episode")
    assert page.locator("li.message").count() == 3
    assert page.locator("#delete-episode").count() == 0  # there is no episode to delete yet
    accessible(page)


def test_timeline_filters_by_natural_language_zooms_and_opens_an_episode(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/demo/timeline")
    page.wait_for_selector("body[data-timeline-ready]")
    assert page.locator(".legend li").all_inner_texts() == ["chat-1", "chat-2"]
    dots = page.locator("svg.axis circle.dot")
    assert dots.count() == page.locator("ol.episodes li").count() >= 4
    accessible(page)
    shoot(page, "timeline")

    page.get_by_role("textbox", name="Time").fill("last week")  # before the group's last activity (25 May): 15-22 May
    redrawn(page, page.get_by_role("button", name="Apply").click)
    assert "time=last" in page.evaluate("location.hash")
    titles = page.locator("ol.episodes li").all_inner_texts()
    assert titles and all("chat-2" in t for t in titles) and any("2023-05-17" in t for t in titles)
    assert page.locator(".legend li").all_inner_texts() == ["chat-2"]

    redrawn(page, page.get_by_role("link", name="Fit all").click)
    before = page.locator("#window").inner_text()
    redrawn(page, page.get_by_role("button", name="Zoom in").click)
    after = page.locator("#window").inner_text()
    days = [float(re.search(r"· ([\d.]+) days$", text).group(1)) for text in (before, after)]
    assert 17 < days[0] < 19 and abs(days[1] - days[0] / 2) <= 0.1, (before, after)  # 17 days and a margin
    redrawn(page, page.get_by_role("link", name="Fit all").click)
    page.locator("ol.episodes li a").first.click()
    page.get_by_role("heading", name="Source messages, in order").wait_for()
    ids = page.locator("li.message").evaluate_all("nodes => nodes.map(n => n.dataset.message)")
    assert ids and ids[0] == "chat-1-0-0" and ids == sorted(ids, key=lambda m: int(m.rsplit("-", 1)[1]))
    terms = page.locator("dl.meta dt").all_inner_texts()
    made = dict(zip(terms, page.locator("dl.meta dd").all_inner_texts(), strict=True))
    assert made["Made by"].startswith("offline — built offline"), made
    assert made["Boundary"].split(" — ")[0] in ("time_gap", "flush", "end_of_session", "topic_shift"), made
    accessible(page)
    shoot(page, "episode")


def test_search_shows_hits_with_score_components(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/demo/search")
    page.get_by_label("Query").fill("hiking with the dog at the lake")
    page.get_by_label("Results (k)").fill("3")
    page.get_by_role("button", name="Search").click()
    hits = page.locator("li.hit")
    hits.first.wait_for()
    assert 1 <= hits.count() <= 3
    assert "Lake Tahoe" in hits.first.inner_text() or "hiking" in hits.first.inner_text().lower()
    for name in ("vector", "keyword", "fused", "recency"):
        assert hits.first.get_by_label(name).count() == 1
    page.get_by_label("Session").select_option("chat-2")
    page.get_by_role("button", name="Search").click()
    wait_until(page, "[...document.querySelectorAll('li.hit')].every(h => h.innerText.includes('chat-2'))")
    page.get_by_label("Session").select_option("")
    page.get_by_role("button", name="Search").click()
    hits.first.wait_for()
    accessible(page)
    shoot(page, "search")


def context_state(page: Any) -> tuple[int, int, list[str]]:
    used, budget = map(int, re.findall(r"\d+", page.locator("#c-tokens").inner_text()))
    messages = page.locator("#c-text a.ctx-line").evaluate_all("nodes => nodes.map(n => n.dataset.message)")
    return used, budget, messages


def test_context_budget_slider_changes_text_and_citations(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/demo/context")
    page.get_by_label("Question").fill("What did Caroline do with Rex at Lake Tahoe?")
    page.get_by_label("Token budget").fill("1000")
    page.get_by_role("button", name="Build context").click()
    wait_until(page, "document.querySelector('#c-tokens')?.innerText.includes('of 1000')")
    used, budget, wide = context_state(page)
    assert 0 < used <= budget == 1000 and len(wide) >= 4
    # Each piece shows its marker, [1]..[N], which links to the episode its citation names.
    markers = page.locator("#c-text section.piece").evaluate_all("nodes => nodes.map(n => n.dataset.marker)")
    assert len(markers) >= 2 and markers == [f"[{n}]" for n in range(1, len(markers) + 1)]
    shown = page.locator("#c-text section.piece a.cite").evaluate_all("nodes => nodes.map(n => n.textContent)")
    assert shown == markers
    assert "chat-1-0-0" in wide
    page.get_by_label("Token budget").fill("64")
    wait_until(page, "document.querySelector('#c-tokens')?.innerText.includes('of 64')")
    used, budget, narrow = context_state(page)
    assert 0 < used <= 64 and 0 < len(narrow) < len(wide) and set(narrow) <= set(wide)
    page.get_by_label("Token budget").fill("400")
    wait_until(page, "document.querySelector('#c-tokens')?.innerText.includes('of 400')")
    accessible(page)
    shoot(page, "context")
    link = page.locator("#c-text a.ctx-line").first
    cited = link.get_attribute("data-message")
    link.click()
    page.locator(f"li.message.highlight[data-message='{cited}']").wait_for()


def test_an_excerpt_is_marked_and_opens_its_whole_message(local: AppServer, open_page: Callable) -> None:
    """A long assistant reply is held in part: the line says so, names its span, and opens the whole message.
    Messages keep their lines (a code block its shape) inside their piece."""
    steps = [f"Step {n}: review the backlog, estimate the tasks and keep a buffer for reviews." for n in range(30)]
    steps.insert(17, "Sprint dates:\n```python\nif demo:\n    first_sprint_end = date(2024, 3, 29)\n```")
    steps.insert(18, "Your first sprint ends on March 29, two days before the investor demo.")
    reply = "\n\n".join(steps)
    ask = "Plan my sprints, please.\nTwo weeks each."
    messages = [
        {"id": "ask", "role": "user", "content": ask, "timestamp": T0.isoformat()},
        {"id": "plan", "role": "assistant", "content": reply, "timestamp": (T0 + MINUTE).isoformat()},
    ]
    base = f"{local.url}/v1/groups/assistant-chat/sessions/chat-1"
    assert HTTP.post(f"{base}/messages", json={"messages": messages}, timeout=60).status_code == 200
    assert HTTP.post(f"{base}/flush", timeout=120).status_code == 200
    page, _ = open_page(local.url + "/ui/#/g/assistant-chat/context")
    page.get_by_label("Question").fill("When does my first sprint end?")
    page.get_by_label("Token budget").fill("300")
    page.get_by_role("button", name="Build context").click()
    excerpt = page.locator("#c-text a.ctx-excerpt[data-message='plan']")
    excerpt.wait_for()
    start, end = map(int, (excerpt.get_attribute("data-span") or "").split("-"))
    assert "March 29" in reply[start:end] and end - start < len(reply)
    assert "(excerpt)" in excerpt.inner_text() and "open it whole" in (excerpt.get_attribute("title") or "")
    assert "\n  if demo:\n      first_sprint_end = date(2024, 3, 29)\n" in excerpt.inner_text()
    asked = page.locator("#c-text a.ctx-line[data-message='ask']").inner_text()
    assert asked.endswith("user: Plan my sprints, please.\n  Two weeks each.")
    excerpt.click()
    whole = page.locator("li.message.highlight[data-message='plan']")
    whole.wait_for()
    assert "Step 29" in whole.inner_text()  # the episode page shows the message whole


def confirm(page: Any) -> None:
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    dialog.get_by_role("button", name="Delete").click()


def test_lifecycle_deletes_with_confirmation_and_receipts_and_exports(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/trash/lifecycle")
    page.get_by_role("button", name="Delete session chat-2").wait_for()
    accessible(page)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download export").click()
    lines = Path(download.value.path()).read_text().splitlines()
    assert len(lines) > 20 and json.loads(lines[0])

    page.get_by_role("button", name="Delete session chat-2").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    assert page.get_by_role("button", name="Delete session chat-2").is_visible()  # cancel deletes nothing
    page.get_by_role("button", name="Delete session chat-2").click()
    confirm(page)
    receipt = page.locator("#receipt")
    receipt.wait_for()
    assert "Deleted session chat-2" in receipt.inner_text() and "7 messages" in receipt.inner_text()
    assert page.get_by_role("button", name="Delete session chat-2").count() == 0
    shoot(page, "lifecycle")

    page.goto(local.url + "/ui/#/g/trash/timeline")
    page.wait_for_selector("body[data-timeline-ready]")
    assert page.locator(".legend li").all_inner_texts() == ["chat-1"]
    assert all("chat-2" not in t for t in page.locator("ol.episodes li").all_inner_texts())

    # an episode of several messages: deleting one repairs it, and the episode is still there to delete
    assert local.service is not None
    chosen = next(e for e in local.service.timeline("trash", session_id="chat-1").episodes if e.message_count >= 2)
    page.locator(f"ol.episodes li a[href$='{chosen.uuid}']").click()
    last = page.locator("li.message").last
    doomed = last.get_attribute("data-message")
    last.get_by_role("button", name=f"Delete message {doomed}").click()
    confirm(page)
    page.locator("#receipt").wait_for()
    assert "\n1 message\n" in page.locator("#receipt").inner_text()
    assert doomed in (page.locator("#receipt pre").text_content() or "")
    page.locator("#episode-rebuilt").wait_for()  # the page says its text is stale and offers the rebuilt one
    assert page.locator(f"li.message[data-message='{doomed}']").count() == 0
    assert page.get_by_role("button", name="Delete episode").is_enabled()
    page.get_by_role("button", name="Delete episode").click()
    confirm(page)
    page.locator("#receipt h2", has_text="Deleted episode").wait_for()
    # the episode is gone: no control is left that could only answer 404
    page.locator("#episode-gone").wait_for()
    assert page.get_by_role("button", name="Delete episode").is_disabled()
    assert all(b.is_disabled() for b in page.locator("li.message button").all())


def test_an_episode_is_corrected_and_a_message_redacted_from_its_page(local: AppServer, open_page: Callable) -> None:
    """Correct an episode's title (its revisions list grows), redact one of its messages after a confirmation that
    names it and quotes its text, see both in the lifecycle view's audit trail; search and context take a speaker."""
    service = local.service
    assert service is not None
    seed_conversation(service, "fix")
    # the longest episode of chat-1 (where the segmenter cuts it is not what this test is about)
    first = max(service.timeline("fix", session_id="chat-1").episodes, key=lambda e: (e.message_count, e.uuid))
    assert first.message_count >= 3
    page, _ = open_page(f"{local.url}/ui/#/g/fix/s/chat-1/e/{first.uuid}")
    page.locator("#correct-form").wait_for()
    page.locator("#revisions li.revision").first.wait_for()
    assert page.locator("#revisions li.revision").count() == 1
    accessible(page)

    page.get_by_label("Title").fill("Hiking at Lake Tahoe with Rex")
    page.get_by_label("Reason (kept with the revision)").fill("a clearer title")
    page.get_by_role("button", name="Save correction").click()
    page.locator("#corrected").wait_for()
    assert page.locator("h1").first.inner_text() == "Hiking at Lake Tahoe with Rex"
    wait_until(page, "document.querySelectorAll('#revisions li.revision').length === 2")
    assert "a clearer title" in page.locator("#revisions").inner_text()
    assert service.get_episode("fix", "chat-1", first.uuid).title == "Hiking at Lake Tahoe with Rex"

    doomed = page.locator("li.message").nth(2)
    message_id = doomed.get_attribute("data-message")
    said = next(m.content for m in service.history("fix", "chat-1") if m.id == message_id)
    doomed.get_by_role("button", name=f"Redact message {message_id}").click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    assert f"Redact message {message_id}?" in dialog.inner_text() and said[:40] in dialog.inner_text()
    dialog.get_by_role("button", name="Cancel").click()
    assert next(m.content for m in service.history("fix", "chat-1") if m.id == message_id) == said  # cancel: nothing
    doomed.get_by_role("button", name=f"Redact message {message_id}").click()
    dialog.get_by_role("button", name="Redact").click()
    page.locator("#redacted").wait_for()
    assert page.locator(f"li.message[data-message='{message_id}'] p").inner_text() == "[redacted]"
    assert said not in page.locator("main").inner_text()
    assert page.locator(f"li.message[data-message='{message_id}']").get_by_role("button", name="Redact").count() == 0
    accessible(page)
    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, "correction")

    visit(page, f"{local.url}/ui/#/g/fix/lifecycle")
    page.locator("#audit tr[data-action='redact']").wait_for()
    actions = page.locator("#audit tbody tr").evaluate_all("rows => rows.map(r => r.dataset.action)")
    assert actions[:2] == ["redact", "correct"]
    assert said not in page.locator("#audit").inner_text()
    accessible(page)

    visit(page, f"{local.url}/ui/#/g/fix/search")
    page.get_by_label("Query").fill("hiking with the dog at the lake")
    page.get_by_label("Speaker").fill("Melanie")
    page.get_by_role("button", name="Search").click()
    page.locator("li.hit").first.wait_for()
    chips = page.locator("li.hit a.chip").all_inner_texts()
    melanie = {
        m["id"]
        for m in conversation_messages("chat-1") + conversation_messages("chat-2")
        if m["producer_id"] == "Melanie"
    }
    assert chips and set(chips) <= melanie
    visit(page, f"{local.url}/ui/#/g/fix/context")
    page.get_by_label("Question").fill("the hiking trip with Rex")
    page.get_by_label("Speaker").fill("Melanie")
    page.get_by_role("button", name="Build context").click()
    page.locator("#c-text a.ctx-line").first.wait_for()
    cited = page.locator("#c-text a.ctx-line").evaluate_all("nodes => nodes.map(n => n.dataset.message)")
    assert cited and set(cited) <= melanie


def test_long_session_lists_page(local: AppServer, open_page: Callable) -> None:
    service = local.service
    for n in range(23):
        service.add_messages("many", f"s{n:02d}", [{"id": "m", "content": f"Session {n} opens.", "producer_id": "Ana"}])
    page, _ = open_page(local.url + "/ui/#/g/many")
    rows = page.locator("tbody tr")
    rows.first.wait_for()
    assert rows.count() == 20 and page.get_by_role("button", name="← Previous").is_disabled()
    page.get_by_role("button", name="Next →").click()
    wait_until(page, "document.querySelectorAll('tbody tr').length === 3")
    assert page.locator("tbody tr th").first.inner_text() == "s20"
    assert page.get_by_role("button", name="Next →").is_disabled()


def test_narrow_width_has_no_sideways_scrolling(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/demo/timeline", viewport={"width": 390, "height": 844})
    page.wait_for_selector("body[data-timeline-ready]")
    for view in ("timeline", "search", "context", "lifecycle", ""):
        visit(page, local.url + "/ui/#/g/demo" + (f"/{view}" if view else ""))
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, (view, wide)
        assert page.get_by_role("link", name="Search").is_visible()
    redrawn(page, lambda: page.goto(local.url + "/ui/#/g/demo/timeline"))
    shoot(page, "narrow")


def test_errors_are_explained_in_plain_words(local: AppServer, open_page: Callable) -> None:
    page, _ = open_page(local.url + "/ui/#/g/no-such-group", allowed={404, 422})
    banner = page.locator("#banner")
    banner.wait_for()
    assert "Not found" in banner.inner_text() and "{" not in banner.inner_text()
    visit(page, local.url + "/ui/#/g/demo/timeline?time=2020")
    assert page.get_by_text("No episodes in this window.").is_visible()
    accessible(page)
    visit(page, local.url + "/ui/#/g/demo/timeline?time=when%20pigs%20fly")
    assert "could not accept this input" in banner.inner_text() and "cannot read the time window" in banner.inner_text()
    words = page.evaluate(
        """() => [403, 503].map(status => epimemCore.explain(
              new epimemCore.ApiError(status, 'x', 'the store did not answer', {}, 'GET'), 'read'))"""
    )
    assert "does not allow" in words[0] and "unavailable right now" in words[1]
    assert all("{" not in text for text in words)


# -- keys -----------------------------------------------------------------------------------------


def test_keys_ask_once_per_tab_and_scope_groups_and_actions(keyed: AppServer, open_page: Callable) -> None:
    page, watch = open_page(keyed.url + "/ui/", allowed={401})
    page.get_by_role("heading", name="This server needs an API key").wait_for()
    accessible(page)
    shoot(page, "key")
    page.get_by_label("API key").fill("not-a-real-key-0123456")
    page.get_by_role("button", name="Use this key").click()
    page.get_by_text("That key was not accepted").wait_for()
    page.get_by_label("API key").fill(READ_KEY)
    page.get_by_role("button", name="Use this key").click()
    page.get_by_role("row", name=re.compile("demo")).wait_for()
    assert page.get_by_role("row", name=re.compile("secret")).count() == 0  # only the key's groups
    assert page.evaluate("sessionStorage.getItem('epimem.apiKey')") == READ_KEY
    assert page.evaluate("localStorage.length") == 0
    assert page.get_by_text("key · read").is_visible()

    page.goto(keyed.url + "/ui/#/g/demo/lifecycle")
    page.locator("#read-only").wait_for()
    assert page.get_by_role("button", name=re.compile("Delete|Download")).count() == 0
    page.goto(keyed.url + "/ui/#/g/demo/timeline")
    page.wait_for_selector("body[data-timeline-ready]")
    page.locator("ol.episodes li a").first.click()
    page.get_by_role("heading", name="Source messages, in order").wait_for()
    assert page.get_by_role("button", name=re.compile("Delete")).count() == 0

    watch.allowed.add(403)  # a write the key may not do: refused by the server and explained
    with page.expect_response(lambda r: r.request.method == "DELETE") as refused:
        page.evaluate(
            """() => { const slot = document.createElement('div'); slot.id = 'attempt';
                 document.querySelector('main').append(slot);
                 epimemViews.remove(epimem.ctx, 'demo', 'session chat-1', 'Test.',
                                    '/groups/demo/sessions/chat-1', slot); }"""
        )
        confirm(page)
    assert refused.value.status == 403
    assert refused.value.request.headers["content-type"] == "application/json"
    page.locator("#attempt .error").wait_for()
    assert "read-only" in page.locator("#attempt").inner_text()
    page.goto(keyed.url + "/ui/#/g/secret")
    page.locator("#banner").wait_for()
    assert "does not allow this" in page.locator("#banner").inner_text()
    page.goto(keyed.url + "/ui/#/g/demo")
    page.get_by_role("row", name=re.compile("Weekend plans")).wait_for()  # still there

    page.get_by_role("button", name="Forget key").click()
    page.get_by_role("heading", name="This server needs an API key").wait_for()
    page.get_by_label("API key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Use this key").click()
    page.get_by_text("key · admin").wait_for()
    page.goto(keyed.url + "/ui/#/groups")
    page.get_by_role("row", name=re.compile("secret")).wait_for()
    page.goto(keyed.url + "/ui/#/g/demo/lifecycle")
    page.get_by_role("button", name="Delete session chat-1").wait_for()


# -- scale ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_group(local: AppServer, embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory) -> str:
    """1,000 episodes in one group: one message each, 2 hours apart over ~83 days, in 4 sessions."""
    service = local.service
    topics = ["garden", "budget", "travel", "music", "recipes", "running", "books", "repairs"]
    for session in range(4):
        batch = [
            {
                "id": f"big-{session}-{i}",
                "content": f"Note {i} about {topics[i % len(topics)]} in stream {session}.",
                "producer_id": "Ana",
                "timestamp": (T0 + timedelta(hours=2 * (4 * i + session))).isoformat(),
            }
            for i in range(250)
        ]
        service.add_messages("big", f"stream-{session}", batch)
        service.flush("big", f"stream-{session}")
    return "big"


@pytest.mark.slow
def test_timeline_of_a_thousand_episodes_renders_one_page_at_a_time(
    local: AppServer, big_group: str, open_page: Callable
) -> None:
    page, _ = open_page(local.url + f"/ui/#/g/{big_group}/timeline")
    page.wait_for_selector("body[data-timeline-ready]")
    total = int(re.search(r"of (\d+)", page.locator("p[aria-live]").inner_text()).group(1))
    assert total == 1000
    assert page.locator("ol.episodes li").count() == 100  # one page, never the whole group
    timings = [page.evaluate("window.epimemTimelineMs")]
    for _ in range(2):
        redrawn(page, lambda: page.evaluate("epimem.refresh()"))
        timings.append(page.evaluate("window.epimemTimelineMs"))
    print(f"\ntimeline of 1,000 episodes: rendered in {', '.join(f'{t:.0f}' for t in timings)} ms")
    page.get_by_role("button", name="Load more").click()
    wait_until(page, "document.querySelectorAll('ol.episodes li').length === 200")
    redrawn(page, page.get_by_role("button", name="Zoom in").click)
    shown = int(re.search(r"of (\d+)", page.locator("p[aria-live]").inner_text()).group(1))
    assert 0 < shown < 1000
