"""The limits on a batch of messages, the same on every surface that takes one (``POST
.../messages`` and the MCP tool ``add_messages``): at most ``max_messages_per_batch`` messages,
each at most ``max_message_chars`` characters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from api.errors import PayloadTooLargeError
from memory.errors import InvalidInputError


class BatchLimits(Protocol):
    max_messages_per_batch: int
    max_message_chars: int


class _Sized(Protocol):
    id: str
    content: str


def check_batch(messages: Sequence[_Sized], limits: BatchLimits) -> None:
    """Raise 413 for too many messages, 422 for a message too long (naming ids, never content)."""
    if len(messages) > limits.max_messages_per_batch:
        raise PayloadTooLargeError(
            f"a batch holds at most {limits.max_messages_per_batch} messages",
            details={"max_messages_per_batch": limits.max_messages_per_batch, "received": len(messages)},
        )
    too_long = [m.id for m in messages if len(m.content) > limits.max_message_chars]
    if too_long:
        raise InvalidInputError(
            f"message content is longer than {limits.max_message_chars} characters",
            details={"max_message_chars": limits.max_message_chars, "ids": too_long[:20]},
        )
