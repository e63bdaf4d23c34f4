"""The ids in request paths and queries: any text without control characters and without '/'
(which cannot be addressed in a URL path; such ids are usable from Python, not over HTTP)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, ValidationError

from memory.errors import InvalidInputError
from memory.models import MAX_ID_LENGTH, MAX_MESSAGE_ID_LENGTH, check_message_id, check_scope_id
from retrieval.filters import RecallFilter

# Not blank.
_PATH_ID_PATTERN = r"^[^\x00-\x1f\x7f/]*[^\s\x00-\x1f\x7f/][^\x00-\x1f\x7f/]*$"

GroupId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        pattern=_PATH_ID_PATTERN,
        description="group id (1-500 characters, no control characters, no '/')",
        examples=["team-a"],
    ),
    AfterValidator(check_scope_id),
]
SessionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        pattern=_PATH_ID_PATTERN,
        description="session id (1-500 characters, no control characters, no '/')",
        examples=["chat-1"],
    ),
    AfterValidator(check_scope_id),
]
MessageIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_MESSAGE_ID_LENGTH,
        pattern=_PATH_ID_PATTERN,
        description="message id (1-256 characters, no control characters, no '/')",
        examples=["m1"],
    ),
    AfterValidator(check_message_id),
]
SessionIdQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=MAX_ID_LENGTH, description="only this session"),
    AfterValidator(lambda value: None if value is None else check_scope_id(value)),
]
EpisodeIdPath = Annotated[
    str,
    Path(min_length=1, max_length=MAX_ID_LENGTH, pattern=_PATH_ID_PATTERN, description="episode uuid"),
]

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
