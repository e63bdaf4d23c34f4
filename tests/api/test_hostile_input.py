"""No input causes a 500: timestamps and windows at the ends of the datetime range, lone surrogates,
arbitrary text, numbers and times in every field of the write and read routes (Hypothesis); and the
contract bugs of issue 14 (limit=1000, retry without a timestamp, 500 with a request id, import
validation). Data written before stays readable and exportable."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder
from memory.ids import GROUP_SUMMARY_SESSION

GROUP = "hostile"
S = f"/v1/groups/{GROUP}/sessions/base"
EARLY, LATE = "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    service = Epimem.from_settings(
        Settings(data_dir=tmp_path_factory.mktemp("hostile")), background=False, embedder=embedder
    )
    with TestClient(create_app(service)) as test_client:
        seed = [
            {"id": f"b{i}", "content": f"Base message {i} about hiking.", "timestamp": f"2023-05-0{i + 1}T10:00:00Z"}
            for i in range(3)
        ]
        assert test_client.post(f"{S}/messages", json={"messages": seed}).status_code == 200
        assert test_client.post(f"{S}/flush").status_code == 200
        yield test_client
    service.close()


def _status(response) -> int:  # type: ignore[no-untyped-def]
    assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
    return int(response.status_code)


def _readable(client: TestClient) -> None:
    """What was written before still reads and exports in full."""
    assert [m["id"] for m in client.get(f"{S}/messages").json()["messages"]] == ["b0", "b1", "b2"]
    hits = client.post(f"/v1/groups/{GROUP}/search", json={"query": "hiking", "expand": True}).json()["hits"]
    assert hits and all(h["messages"] for h in hits)
    export = client.get(f"/v1/groups/{GROUP}/export")
    assert export.status_code == 200
    assert json.loads(export.text.splitlines()[-1])["type"] == "end"


@pytest.mark.parametrize("timestamp", [EARLY, LATE, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
def test_message_timestamps_at_the_ends_of_time_are_refused(client: TestClient, timestamp: str) -> None:
    body = {"messages": [{"id": "t1", "content": "hello", "timestamp": timestamp}]}
    response = client.post("/v1/groups/hostile/sessions/ends/messages", json=body)
    assert response.status_code == 422 and "out of range" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "scope",
    [
        {"time": "9999"},
        {"time": "in 9999"},
        {"time": "December 9999"},
        {"time": "yesterday", "reference_time": "0001-01-01T00:00:00Z"},
        {"time": "tomorrow", "reference_time": "9999-12-31T12:00:00Z"},
        {"time": "last year", "reference_time": "0001-01-02T00:00:00Z"},
        {"start": EARLY},
        {"end": LATE},
    ],
)
def test_windows_at_the_ends_of_time_are_a_clear_4xx(client: TestClient, scope: dict) -> None:
    search = client.post(f"/v1/groups/{GROUP}/search", json={"query": "hiking", **scope})
    assert search.status_code == 422, search.text
    context = client.post(f"/v1/groups/{GROUP}/context", json={"query": "hiking", **scope})
    assert context.status_code == 422, context.text


def test_timeline_and_summaries_near_year_one(client: TestClient) -> None:
    assert client.get(f"/v1/groups/{GROUP}/timeline", params={"start": EARLY}).status_code == 422
    timeline = client.get(f"/v1/groups/{GROUP}/timeline", params={"start": "0001-01-02T00:00:00Z"})
    assert timeline.status_code == 200 and len(timeline.json()["episodes"]) >= 1
    for reference in ("0001-01-01T00:00:00Z", "0001-01-03T00:00:00Z", "0001-01-02T00:00:00+00:00"):
        answer = client.post(f"/v1/groups/{GROUP}/summaries", json={"days_back": 30, "reference_time": reference})
        assert answer.status_code == 422, answer.text


def test_a_question_about_an_unrepresentable_time_still_gets_context(client: TestClient) -> None:
    for question in ("what happened in December 9999?", "anything on 31 December 9999 or in 9999-12?"):
        answer = client.post(f"/v1/groups/{GROUP}/context", json={"query": question})
        assert answer.status_code == 200, answer.text
        hits = client.post(f"/v1/groups/{GROUP}/search", json={"query": question})
        assert hits.status_code == 200 and hits.json()["hits"]


def _surrogate_bodies() -> list[tuple[str, str, str]]:
    message = '{"messages": [{"id": "%s", "content": "%s", "metadata": %s}]}'
    return [
        ("POST", f"{S}/messages", message % ("\\udc00", "x", "{}")),
        ("POST", f"{S}/messages", message % ("ok-id", "x \\ud800 y", "{}")),
        ("POST", f"{S}/messages", message % ("ok-id", "x", '{"k": "\\udc00"}')),
        ("POST", f"{S}/messages", message % ("ok-id", "x", '{"\\udc00": 1}')),
        ("POST", f"{S}/messages", message % ("ok-id", "x", '{"k": ["a", {"b": "\\udfff"}]}')),
        ("PUT", f"/v1/groups/{GROUP}", '{"metadata": {"k": "\\udc00"}}'),
        ("PUT", f"/v1/groups/{GROUP}", '{"description": "\\udc00"}'),
        ("PUT", f"{S}", '{"metadata": {"k": "\\udc00"}}'),
        ("PUT", f"{S}", '{"title": "\\ud83d"}'),
    ]


@pytest.mark.parametrize(("method", "path", "body"), _surrogate_bodies())
def test_lone_surrogates_are_refused_at_the_door(client: TestClient, method: str, path: str, body: str) -> None:
    response = client.request(method, path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert "surrogate" in response.text or "unicode string" in response.text
    _readable(client)


def test_history_limit_1000_and_paging(client: TestClient) -> None:
    page = client.get(f"{S}/messages", params={"limit": 1000})
    assert page.status_code == 200 and page.json()["next_cursor"] is None
    first = client.get(f"{S}/messages", params={"limit": 2}).json()
    assert [m["id"] for m in first["messages"]] == ["b0", "b1"] and first["next_cursor"]
    last = client.get(f"{S}/messages", params={"limit": 1, "cursor": first["next_cursor"]}).json()
    assert [m["id"] for m in last["messages"]] == ["b2"] and last["next_cursor"] is None
    assert client.get(f"{S}/messages", params={"limit": 1001}).status_code == 422


def test_retrying_a_message_without_timestamp_is_a_duplicate(client: TestClient) -> None:
    path = f"/v1/groups/{GROUP}/sessions/retry/messages"
    body = {"messages": [{"id": "r1", "content": "sent without a time"}]}
    first = client.post(path, json=body)
    assert first.json()["accepted"] == ["r1"]
    again = client.post(path, json=body)
    assert again.status_code == 200 and again.json()["duplicates"] == ["r1"], again.text
    changed = client.post(path, json={"messages": [{"id": "r1", "content": "other text"}]})
    assert changed.status_code == 409
    stamped = client.post(path, json={"messages": [{"id": "r1", "content": "sent without a time", "timestamp": 0}]})
    assert stamped.status_code == 409  # a stated time must match the stored one


def test_a_500_carries_the_request_id_and_its_log_line_too(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    app = client.app

    @app.get("/boom-for-test")  # type: ignore[attr-defined,misc]
    def boom() -> None:
        raise RuntimeError("kaboom")

    with caplog.at_level(logging.ERROR, logger="epimem.api"):
        response = client.get("/boom-for-test", headers={"X-Request-ID": "req-500-abc"})
    assert response.status_code == 500
    assert response.headers["X-Request-ID"] == "req-500-abc"
    assert "req-500-abc" in response.json()["error"]["message"]
    failures = [r for r in caplog.records if r.exc_info and "kaboom" in str(r.exc_info[1])]
    assert failures and getattr(failures[0], "request_id", None) == "req-500-abc"
    no_id = client.get("/boom-for-test")
    assert no_id.status_code == 500 and no_id.headers["X-Request-ID"]


def _export_lines(client: TestClient) -> list[dict]:
    return [json.loads(line) for line in client.get(f"/v1/groups/{GROUP}/export").text.splitlines()]


def _import(client: TestClient, records: list[dict]) -> tuple[int, dict]:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    response = client.post("/v1/groups/imported/import", content=body, headers={"content-type": "application/x-ndjson"})
    return response.status_code, response.json()


def test_import_refuses_reserved_session_and_dangling_citations(client: TestClient) -> None:
    records = _export_lines(client)
    episode_line = next(i for i, r in enumerate(records) if r["type"] == "episode")
    cited = records[episode_line]["episode"]["source_message_ids"][0]
    dangling = [r for r in records if not (r["type"] == "message" and r["record"]["message"]["id"] == cited)]
    dangling = [r for r in dangling if not (r["type"] == "message_vector" and r["message_id"] == cited)]
    dangling[-1] = {**dangling[-1], "counts": _counts(dangling)}
    status, body = _import(client, dangling)
    line = next(i for i, r in enumerate(dangling, start=1) if r["type"] == "episode")
    assert status == 422 and body["error"]["message"].startswith(f"line {line}:"), body
    assert cited in body["error"]["details"]["message_ids"]

    message_line = next(i for i, r in enumerate(records) if r["type"] == "message")
    reserved = [dict(r) for r in records]
    record = dict(reserved[message_line]["record"])
    reserved[message_line] = {**reserved[message_line], "record": {**record, "session_id": GROUP_SUMMARY_SESSION}}
    status, body = _import(client, reserved)
    assert status == 422 and body["error"]["message"].startswith(f"line {message_line + 1}:"), body
    assert "reserved" in body["error"]["message"]
    status, body = _import(client, records)
    assert status == 200, body  # the untouched export imports


def _counts(records: list[dict]) -> dict:
    kinds = [r["type"] for r in records]
    return {
        "sessions": kinds.count("session"),
        "messages": kinds.count("message"),
        "episodes": kinds.count("episode"),
        "summaries": kinds.count("summary"),
        "message_vectors": kinds.count("message_vector"),
    }


# -- anything, anywhere ----------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
_TIMES = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from([EARLY, LATE, "9999", "in 9999", "December 9999", "yesterday", "last week", "0", "-1"]),
)
_ANY = st.one_of(
    _TEXT,
    _TIMES,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(_TEXT, max_size=3),
    st.dictionaries(_TEXT, _TEXT, max_size=3),
)
_MESSAGE_FIELDS = ["id", "content", "timestamp", "role", "producer_id", "produced_for_id", "metadata"]
_READ_FIELDS = ["query", "time", "reference_time", "start", "end", "k", "timezone", "session_ids", "order"]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    message_field=st.sampled_from(_MESSAGE_FIELDS),
    read_field=st.sampled_from(_READ_FIELDS),
    value=_ANY,
    path_text=_TEXT,
)
def test_anything_anywhere_is_never_a_5xx(
    client: TestClient, message_field: str, read_field: str, value: object, path_text: str
) -> None:
    def send(method: str, path: str, body: dict) -> None:
        # json.dumps escapes lone surrogates as \\udc00, as a JSON client in any language may send them
        headers = {"content-type": "application/json"}
        _status(client.request(method, path, content=json.dumps(body).encode(), headers=headers))

    message = {"id": "h1", "content": "hostile content", "timestamp": "2023-06-01T00:00:00Z", message_field: value}
    send("POST", "/v1/groups/hostile/sessions/any/messages", {"messages": [message]})
    for route in ("search", "context"):
        send("POST", f"/v1/groups/{GROUP}/{route}", {"query": "hiking", read_field: value})
    text = (value if isinstance(value, str) else str(value)).encode("utf-8", "replace").decode()
    for params in ({"start": text}, {"end": text}, {"cursor": text}, {"limit": text}, {"order": text}):
        _status(client.get(f"/v1/groups/{GROUP}/timeline", params=params))
    send("PUT", f"/v1/groups/{GROUP}/sessions/any", {"title": value, "metadata": {"v": value}})
    send("PUT", f"/v1/groups/{GROUP}", {"description": value, "metadata": {text: value}})
    send("POST", f"/v1/groups/{GROUP}/summaries", {"days_back": 7, "reference_time": value})
    segment = quote(path_text.encode("utf-8", "replace").decode(), safe="") or "x"
    _status(client.get(f"/v1/groups/{GROUP}/sessions/{segment}/messages"))
    _readable(client)


# -- issue 32.6: hostile bodies get a 4xx ----------------------------------------------------------


def test_an_import_line_nested_a_thousand_deep_is_a_422(client: TestClient) -> None:
    records = _export_lines(client)
    message_line = next(i for i, r in enumerate(records) if r["type"] == "message")
    line = json.dumps(records[message_line])
    nested = line[:-1] + ', "deep": ' + "[" * 1000 + "]" * 1000 + "}"
    body = "\n".join([json.dumps(r) for r in records[:message_line]] + [nested]) + "\n"
    response = client.post(
        "/v1/groups/imported/import", content=body.encode(), headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 422, response.text
    deep_metadata = {"k": json.loads("[" * 100 + "]" * 100)}
    message = {"id": "deep", "content": "deep metadata", "metadata": deep_metadata}
    response = client.post(f"{S}/messages", json={"messages": [message]})
    assert response.status_code == 422 and "nested at most" in response.text


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_not_stored_as_null(client: TestClient, number: str) -> None:
    bodies = [
        ("POST", f"{S}/messages", '{"messages": [{"id": "nan1", "content": "x", "metadata": {"v": NUMBER}}]}'),
        ("PUT", f"{S}", '{"metadata": {"v": [1, NUMBER]}}'),
        ("PUT", f"/v1/groups/{GROUP}", '{"metadata": {"v": {"w": NUMBER}}}'),
    ]
    for method, path, body in bodies:
        content = body.replace("NUMBER", number)
        response = client.request(method, path, content=content, headers={"content-type": "application/json"})
        assert response.status_code == 422 and "finite" in response.text, (path, response.text)
    assert client.get(f"{S}/messages").json()["messages"][-1]["id"] == "b2"


@pytest.mark.parametrize("blank", [" \u200b ", "\u200b", "\ufeff", "\u2060\u00a0"])
def test_visually_blank_ids_are_refused(client: TestClient, blank: str) -> None:
    message = client.post(f"{S}/messages", json={"messages": [{"id": blank, "content": "x"}]})
    assert message.status_code == 422 and "blank" in message.text
    path = f"/v1/groups/{GROUP}/sessions/{quote(blank)}/messages"
    session = client.post(path, json={"messages": [{"id": "ok", "content": "x"}]})
    assert session.status_code == 422 and "blank" in session.text


def test_a_lone_surrogate_in_search_session_ids_is_refused(client: TestClient) -> None:
    body = '{"query": "hiking", "session_ids": ["base", "\\udc00"]}'
    for route in ("search", "context"):
        response = client.post(
            f"/v1/groups/{GROUP}/{route}", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 422 and "surrogate" in response.text, response.text


def test_a_timezone_with_a_control_character_says_what_is_wrong(client: TestClient) -> None:
    answers = [
        client.post(
            f"/v1/groups/{GROUP}/search", json={"query": "hiking", "time": "last week", "timezone": "Europe/\x01"}
        ),
        client.get(f"/v1/groups/{GROUP}/timeline/histogram", params={"time": "last week", "timezone": "UTC\x01"}),
    ]
    for answer in answers:
        assert answer.status_code == 422, answer.text
        message = answer.json()["error"]["message"]
        assert "timezone" in message.lower() and not message.startswith("For further information"), message


def test_an_unknown_timezone_is_refused_even_when_no_time_is_named(client: TestClient) -> None:
    """Not ignored because the request happens not to need it: the caller gets told."""
    for route, body in [
        ("search", {"query": "hiking", "timezone": "Mars/Olympus_Mons"}),
        ("context", {"query": "hiking", "time": "yesterday", "timezone": "Mars/Olympus_Mons"}),
        ("context", {"query": "what did we do yesterday?", "timezone": "Nowhere"}),
    ]:
        answer = client.post(f"/v1/groups/{GROUP}/{route}", json=body)
        assert answer.status_code == 422, answer.text
        assert "unknown timezone" in answer.json()["error"]["message"], answer.text
    assert (
        client.post(f"/v1/groups/{GROUP}/search", json={"query": "hiking", "timezone": "Europe/Berlin"}).status_code
        == 200
    )


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (1683540960, "2023-05-08T10:16:00"),  # seconds
        (10_000_000_000, "2286-11-20T17:46:40"),  # once read as milliseconds (1970-04-26)
        (253402214399, "9999-12-30T23:59:59"),  # the last second epimem stores
    ],
)
def test_a_number_is_always_epoch_seconds(client: TestClient, number: int, expected: str) -> None:
    path = f"/v1/groups/{GROUP}/sessions/epoch-{number}/messages"
    assert client.post(path, json={"messages": [{"id": "e", "content": "x", "timestamp": number}]}).status_code == 200
    assert client.get(path).json()["messages"][0]["timestamp"].startswith(expected)


@pytest.mark.parametrize("number", [253402300799, 1683540960000, 10**20])
def test_a_number_beyond_year_9999_in_seconds_is_refused(client: TestClient, number: int) -> None:
    path = f"/v1/groups/{GROUP}/sessions/epoch-bad/messages"
    response = client.post(path, json={"messages": [{"id": "e", "content": "x", "timestamp": number}]})
    assert response.status_code == 422 and "out of range" in response.text, response.text


# -- the MCP tools and the import body: anything is never a server error --------------------------

_TOOL_FIELDS = {
    "add_messages": ["session", "messages", "flush"],
    "search_memory": ["query", "k", "sessions", "time", "reference_time"],
    "get_context": ["query", "token_budget", "sessions", "time", "reference_time"],
    "get_timeline": ["session", "start", "end", "limit", "cursor"],
    "get_episode": ["episode_id", "session"],
    "get_message": ["message_id", "session"],
    "list_sessions": ["group"],
    "delete_session": ["session"],
}
_VALID = {
    "session": "fuzz",
    "messages": [{"id": "f1", "content": "fuzzed words", "timestamp": "2023-06-01T00:00:00Z"}],
    "query": "hiking",
    "episode_id": "nope",
    "message_id": "nope",
}
_MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _call_tool(client: TestClient, tool: str, arguments: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    response = client.post("/mcp", content=json.dumps(body).encode(), headers=_MCP_HEADERS)
    _status(response)
    return dict(response.json())


def test_an_mcp_tool_call_works_in_this_client(client: TestClient) -> None:
    answer = _call_tool(client, "search_memory", {"group": GROUP, "query": "hiking"})
    assert answer["result"]["isError"] is False and "hiking" in json.dumps(answer["result"]).lower()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tool=st.sampled_from(sorted(_TOOL_FIELDS)),
    field_index=st.integers(min_value=0, max_value=10),
    value=_ANY,
    message_field=st.sampled_from([*_MESSAGE_FIELDS, "speaker"]),
)
def test_any_mcp_tool_argument_is_never_a_server_error(
    client: TestClient, tool: str, field_index: int, value: object, message_field: str
) -> None:
    fields = _TOOL_FIELDS[tool]
    arguments = {"group": "mcp-fuzz", **{f: _VALID[f] for f in fields if f in _VALID}}
    arguments[fields[field_index % len(fields)]] = value
    if tool == "add_messages" and field_index % 2:
        arguments["messages"] = [{**_VALID["messages"][0], message_field: value}]
    answer = _call_tool(client, tool, arguments)
    if "error" in answer:  # a JSON-RPC error is the protocol's answer to a malformed request, not a crash
        assert answer["error"]["code"] != -32603, answer
        return
    result = answer["result"]
    if result["isError"]:
        text = result["content"][0]["text"]
        assert not text.startswith("Error executing tool"), text  # the SDK's words for a crash
        assert len(text) < 2000  # one sentence, not the input echoed back


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line_index=st.integers(min_value=0, max_value=50), key_index=st.integers(min_value=0, max_value=50), value=_ANY)
def test_any_import_body_is_never_a_server_error(
    client: TestClient, line_index: int, key_index: int, value: object
) -> None:
    records = _export_lines(client)
    record = records[line_index % len(records)]
    inner = next((k for k in ("record", "episode", "session", "config") if isinstance(record.get(k), dict)), None)
    target = record[inner] if inner else record
    keys = sorted(target)
    target[keys[key_index % len(keys)]] = value
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    response = client.post(
        "/v1/groups/fuzz-import/import", content=body, headers={"content-type": "application/x-ndjson"}
    )
    _status(response)
    _readable(client)
