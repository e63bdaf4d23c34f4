"""A recall filter covers what it returns, not only what it cites: an episode some of whose messages do not pass is
shown in search hits and the timeline as the messages that pass (their lines as its content, a title made of them,
their ids as its sources), so its own title and content never tell what a filtered-out speaker (or channel) said;
an episode all of whose messages pass is shown whole. Over HTTP against a real uvicorn server, on both backends."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from helpers.builders import T0, turns
from helpers.http_client import HTTP
from helpers.servers import AppServer

from api.facade import Epimem

LINES = [
    ("elise", "I signed up for the pottery class on Thursday evenings."),
    ("tom", "Nice, I am taking a woodworking course about making oak chairs."),
    ("elise", "My first pottery bowl cracked in the kiln."),
    ("tom", "My first oak chair wobbles but I love woodworking."),
]
TOMS_WORDS = ("woodworking", "chair", "wobbles", "oak")


@pytest.fixture
def url(make_service: Callable[..., Epimem], serve: Callable[..., AppServer], group_id: str) -> str:
    service = make_service()
    messages = turns(LINES, start=T0)
    for message in messages:  # the channel differs within the episode
        message["metadata"] = {"channel": "email" if message["producer_id"] == "elise" else "sms"}
    service.add_messages(group_id, "chat", messages)
    (episode,) = service.flush(group_id, "chat")
    assert all(word in (episode.title + episode.content).lower() for word in ("pottery", "woodworking"))
    return serve(service).url


def search(url: str, group_id: str, wanted: dict[str, Any] | None) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"query": "pottery class and woodworking chairs", "k": 5, "expand": True}
    if wanted is not None:
        body["filter"] = wanted
    response = HTTP.post(f"{url}/v1/groups/{group_id}/search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return list(response.json()["hits"])


def timeline(url: str, group_id: str, wanted: dict[str, Any] | None) -> list[dict[str, Any]]:
    params = {"filter": json.dumps(wanted)} if wanted is not None else {}
    response = HTTP.get(f"{url}/v1/groups/{group_id}/timeline", params=params, timeout=60)
    assert response.status_code == 200, response.text
    return list(response.json()["episodes"])


@pytest.mark.parametrize("wanted", [{"speakers": ["elise"]}, {"metadata": {"channel": "email"}}, {"roles": ["user"]}])
def test_a_filter_shows_an_episode_as_the_messages_that_pass(url: str, group_id: str, wanted: dict[str, Any]) -> None:
    whole = timeline(url, group_id, None)
    (episode,) = whole
    narrowing = wanted != {"roles": ["user"]}  # every message is a user's: the episode passes whole
    for shown in [hit["episode"] for hit in search(url, group_id, wanted)] + timeline(url, group_id, wanted):
        assert shown["uuid"] == episode["uuid"] and shown["timestamp"] == episode["timestamp"]
        text = (shown["title"] + " " + shown["content"]).lower()
        if narrowing:
            assert shown["source_message_ids"] == ["m0", "m2"] and shown["message_count"] == 2
            assert not [word for word in TOMS_WORDS if word in text], text
            assert "pottery" in text
        else:
            assert shown == episode
    for hit in search(url, group_id, wanted):
        assert {m["id"] for m in hit["messages"]} == ({"m0", "m2"} if narrowing else {"m0", "m1", "m2", "m3"})
    by_id = HTTP.get(f"{url}/v1/groups/{group_id}/sessions/chat/episodes/{episode['uuid']}", timeout=60).json()
    assert by_id["episode"] == episode  # read by its id, without a filter, an episode is itself
