"""Ids: what a group, session, message or episode id may be, checked here and nowhere else. Every surface (the
facade, HTTP paths and bodies, MCP tools through the facade or the client, imports, the command line) calls these
checks: any Unicode text, not blank, without control characters or lone surrogates, within a length."""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import BeforeValidator

from memory.errors import InvalidInputError

MAX_ID_LENGTH = 500  # a group, session or episode id
MAX_MESSAGE_ID_LENGTH = 256
# The session that holds a group's summaries: epimem writes into it, a client never does.
GROUP_SUMMARY_SESSION = "~group-summaries"
# The same rule as a regular expression, for the OpenAPI schema of ids in URL paths (which also cannot hold '/'):
# a description for clients; what is enforced is ``id_problem``.
PATH_ID_PATTERN = r"^[^\x00-\x1f\x7f/]*[^\s\x00-\x1f\x7f/][^\x00-\x1f\x7f/]*$"


def _visible(char: str) -> bool:
    """Not white space and not an invisible format character (zero-width space, joiners, marks)."""
    return not char.isspace() and unicodedata.category(char) != "Cf"


def id_problem(value: str, *, max_length: int = MAX_ID_LENGTH) -> str | None:
    """What is wrong with an id, or None."""
    if not value or not any(_visible(char) for char in value):
        return "id must not be empty or blank (white space and zero-width characters only)"
    if len(value) > max_length:
        return f"id is longer than {max_length} characters"
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        return "id must not contain control characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "id must be valid Unicode: it holds a lone surrogate such as \\udc00"
    return None


def _checked(value: str, max_length: int) -> str:
    problem = id_problem(value, max_length=max_length)
    if problem is not None:
        raise ValueError(problem)  # pydantic reports it where the id stands
    return value


def check_scope_id(value: str) -> str:
    """A group, session or episode id (1-500 characters), for validators: raises ``ValueError``."""
    return _checked(value, MAX_ID_LENGTH)


def check_message_id(value: str) -> str:
    """A message id (1-256 characters), for validators: raises ``ValueError``."""
    return _checked(value, MAX_MESSAGE_ID_LENGTH)


def _require(value: object, max_length: int, what: str) -> None:
    problem = id_problem(value, max_length=max_length) if isinstance(value, str) else "id must be text"
    if problem is not None:
        raise InvalidInputError(f"invalid {what}: {problem}")


def require_scope_ids(*ids: str | None) -> None:
    """Group and session ids given to an operation (None: not given): a 422 naming what is wrong."""
    for value in ids:
        if value is not None:
            _require(value, MAX_ID_LENGTH, "group or session id")


def require_message_id(value: str) -> None:
    """A message id given to an operation: a 422 naming what is wrong."""
    _require(value, MAX_MESSAGE_ID_LENGTH, "message id")


def require_client_session(session_id: str) -> None:
    """A session a client writes into: any valid id but the group summaries' own (a 422)."""
    if session_id == GROUP_SUMMARY_SESSION:
        raise InvalidInputError(f"session id {GROUP_SUMMARY_SESSION!r} is reserved for group summaries")


# Checked before pydantic's own str validation, as the text arrived (a value that is not text is refused there).
ScopeId = Annotated[str, BeforeValidator(lambda v: check_scope_id(v) if isinstance(v, str) else v)]
MessageId = Annotated[str, BeforeValidator(lambda v: check_message_id(v) if isinstance(v, str) else v)]
