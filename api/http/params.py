"""The ids in request paths and queries, checked by ``memory.ids`` (as on every surface); an id with '/' cannot be
addressed in a URL path (it is usable from Python, not over HTTP)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator, ValidationError, WithJsonSchema

from memory.errors import InvalidInputError
from memory.ids import MAX_ID_LENGTH, MAX_MESSAGE_ID_LENGTH, PATH_ID_PATTERN, check_message_id, check_scope_id
from retrieval.filters import RecallFilter


def _path_id(description: str, example: str | None, max_length: int = MAX_ID_LENGTH) -> Any:
    """A path parameter documented with the id rule (``memory.ids``) and checked by it, and by nothing else."""
    schema = {"minLength": 1, "maxLength": max_length, "pattern": PATH_ID_PATTERN}
    return Path(description=description, examples=[example] if example else None, json_schema_extra=schema)


GroupId = Annotated[
    str,
    _path_id("group id (1-500 characters, no control characters, no '/')", "team-a"),
    AfterValidator(check_scope_id),
]
SessionId = Annotated[
    str,
    _path_id("session id (1-500 characters, no control characters, no '/')", "chat-1"),
    AfterValidator(check_scope_id),
]
MessageIdPath = Annotated[
    str,
    _path_id("message id (1-256 characters, no control characters, no '/')", "m1", MAX_MESSAGE_ID_LENGTH),
    AfterValidator(check_message_id),
]
EpisodeIdPath = Annotated[str, _path_id("episode uuid", None), AfterValidator(check_scope_id)]

# An optional id in the query string, checked as in a path (a '/' is allowed there).
_QueryId = Annotated[
    str, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH}), AfterValidator(check_scope_id)
]
SessionIdQuery = Annotated[_QueryId | None, Query(description="only this session")]
GroupIdQuery = Annotated[_QueryId | None, Query(description="only this group")]

# The cursor of a paged listing (memory.pages): the `next_cursor` of the page before. Its key may hold an id of
# 500 characters of up to 4 bytes each, as base64url.
CursorQuery = Annotated[str | None, Query(max_length=4000, description="`next_cursor` of the previous page")]

# A recall filter in a query string (GET /timeline): the JSON of retrieval.filters.RecallFilter.
FilterQuery = Annotated[
    str | None,
    Query(max_length=10_000, description='a recall filter as JSON, e.g. {"speakers": ["Caroline"]} (as in search)'),
]


def parse_filter(value: str | None) -> RecallFilter | None:
    """The filter of a query string, or a 422 naming what is wrong with it."""
    if value is None:
        return None
    try:
        return RecallFilter.model_validate_json(value)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise InvalidInputError(f"filter{'.' + where if where else ''}: {problem['msg']}") from None
