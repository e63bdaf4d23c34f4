"""One paging style: every listing (a session's history, the groups a key reads, a group's sessions, the timeline)
pages by opaque cursor, through the facade, HTTP and the Python client: walking the pages returns every item once,
in order; an item added between pages is neither repeated nor skipped; a cursor that is not the listing's is a 422."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers.builders import T0, messages

from api.facade import Epimem
from api.server import create_app
from epimem_client import EpimemClient
from memory.errors import InvalidInputError
from memory.models import GroupConfiguration, SessionInfo
from memory.pages import encode_cursor

HISTORY = 300
GROUPS = 45
SESSIONS = 25
KEY = "paging-key-0123456789"


@pytest.fixture
def client(service: Epimem) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as test_client:
        yield test_client


def walk(fetch: Callable[[str | None], tuple[list[Any], str | None]]) -> list[Any]:
    """Every item of a listing, page after page, from the first page to the one without a next cursor."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(1000):
        page, cursor = fetch(cursor)
        items += page
        if cursor is None:
            return items
    raise AssertionError("the listing never ended")


@pytest.mark.slow
def test_a_long_history_pages_every_message_once_in_order(service: Epimem, client: TestClient, group_id: str) -> None:
    # Timestamps out of arrival order, and pairs with the same time: the order is time, then arrival.
    batch = messages(HISTORY, gap=timedelta(seconds=30))
    batch = [dict(m, timestamp=(T0 + timedelta(minutes=(i * 7919) % 150)).isoformat()) for i, m in enumerate(batch)]
    for start in range(0, HISTORY, 100):
        service.add_messages(group_id, "long", batch[start : start + 100])
    everything = service.history(group_id, "long", limit=1000)
    assert len(everything) == HISTORY and everything.next_cursor is None
    expected = [m.id for m in everything]
    assert [m.timestamp for m in everything] == sorted(m.timestamp for m in everything)

    def facade(cursor: str | None) -> tuple[list[str], str | None]:
        page = service.history(group_id, "long", limit=37, cursor=cursor)
        return [m.id for m in page], page.next_cursor

    def http(cursor: str | None) -> tuple[list[str], str | None]:
        params = {"limit": 41, **({"cursor": cursor} if cursor else {})}
        body = client.get(f"/v1/groups/{group_id}/sessions/long/messages", params=params).json()
        return [m["id"] for m in body["messages"]], body["next_cursor"]

    remote = EpimemClient(http=client)

    def python_client(cursor: str | None) -> tuple[list[str], str | None]:
        page = remote.history(group_id, "long", limit=50, cursor=cursor)
        return [m.id for m in page], page.next_cursor

    for fetch in (facade, http, python_client):
        assert walk(fetch) == expected


def test_a_message_added_between_pages_is_neither_repeated_nor_skipped(service: Epimem, group_id: str) -> None:
    service.add_messages(group_id, "s", messages(6, gap=timedelta(minutes=10)))
    first = service.history(group_id, "s", limit=3)
    assert [m.id for m in first] == ["m0", "m1", "m2"]
    early = {"id": "early", "content": "Said before the cursor.", "timestamp": (T0 + timedelta(minutes=5)).isoformat()}
    late = {"id": "late", "content": "Said after the cursor.", "timestamp": (T0 + timedelta(minutes=45)).isoformat()}
    service.add_messages(group_id, "s", [early, late])
    rest = service.history(group_id, "s", limit=10, cursor=first.next_cursor)
    assert [m.id for m in rest] == ["m3", "m4", "late", "m5"] and rest.next_cursor is None


@pytest.mark.slow
def test_many_groups_and_sessions_page_every_item_once_in_order(service: Epimem, group_id: str, tmp_path: Path) -> None:
    ours = [f"{group_id}-{n:02d}" for n in range(GROUPS)]
    for group in ours:
        service.put_group(GroupConfiguration(group_id=group))
    for n in range(SESSIONS):
        service.put_session(SessionInfo(group_id=ours[0], session_id=f"s{n:02d}"))
    # A key for this test's groups only: a shared Chroma server holds other tests' groups too.
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": KEY, "groups": [f"{group_id}-*"], "role": "read"}]}))
    app = create_app(service, service.settings.model_copy(update={"api_keys_file": keys}))
    with TestClient(app, headers={"authorization": f"Bearer {KEY}"}) as client:

        def groups(cursor: str | None) -> tuple[list[str], str | None]:
            answer = client.get("/v1/groups", params={"limit": 20, **({"cursor": cursor} if cursor else {})})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            return [g["group_id"] for g in body["groups"]], body["next_cursor"]

        assert walk(groups) == ours  # every group once, sorted by id
        assert EpimemClient(http=client, api_key=KEY).list_groups() == ours

        def sessions(cursor: str | None) -> tuple[list[str], str | None]:
            params = {"limit": 10, **({"cursor": cursor} if cursor else {})}
            body = client.get(f"/v1/groups/{ours[0]}/overview", params=params).json()
            return [s["session"]["session_id"] for s in body["sessions"]], body["next_cursor"]

        listed = walk(sessions)
        assert listed == [info.session_id for info in service.list_sessions(ours[0])] and len(listed) == SESSIONS


@pytest.mark.parametrize(
    "cursor",
    ["not a cursor", "e30", "W10", encode_cursor(["x", 1]), encode_cursor([1.5, 2]), encode_cursor([True, 1, "m"])],
)
def test_a_cursor_that_is_not_the_listings_is_a_422(
    service: Epimem, client: TestClient, group_id: str, cursor: str
) -> None:
    service.add_messages(group_id, "s", messages(2))
    with pytest.raises(InvalidInputError, match="invalid history cursor"):
        service.history(group_id, "s", cursor=cursor)
    for path in (f"/v1/groups/{group_id}/sessions/s/messages", f"/v1/groups/{group_id}/overview"):
        answer = client.get(path, params={"cursor": cursor})
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_input", answer.text
    timeline = client.get(f"/v1/groups/{group_id}/timeline", params={"cursor": cursor})
    assert timeline.status_code == 422 and "invalid timeline cursor" in timeline.text
