"""Paging by opaque cursor, the one way every listing pages (a session's messages, the groups a key reads, a
group's sessions, a timeline): a page's cursor carries the order key of its last item (JSON, base64url without
padding); the next page holds the items strictly after that key, so items added or removed meanwhile never make a
page repeat an item or skip one that stays. A cursor that is not one of the listing's is a 422."""

from __future__ import annotations

import base64
import json
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TypeVar

from memory.errors import InvalidInputError
from memory.models import Message, StoredMessage

T = TypeVar("T")
KeyPart = float | int | str
Key = tuple[KeyPart, ...]


def encode_cursor(key: Sequence[KeyPart]) -> str:
    text = json.dumps(list(key), ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def _part(value: object, kind: type) -> KeyPart:
    if isinstance(value, bool):
        raise TypeError("not a key")
    if kind is float and isinstance(value, int | float):
        return float(value)
    if isinstance(value, kind):
        return value  # type: ignore[return-value]
    raise TypeError("not a key")


def decode_cursor(cursor: str, shape: tuple[type, ...], what: str) -> Key:
    """The order key a cursor carries, with the types of ``shape`` (float, int or str each), or a 422 naming
    the listing (``what``)."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8"))
        if not isinstance(values, list) or len(values) != len(shape):
            raise TypeError("not a key")
        return tuple(_part(value, kind) for value, kind in zip(values, shape, strict=True))
    except (ValueError, TypeError, UnicodeError) as error:  # binascii.Error and JSON errors are ValueErrors
        raise InvalidInputError(f"invalid {what} cursor") from error


def page_after(
    items: Iterable[T],
    key: Callable[[T], Key],
    *,
    shape: tuple[type, ...],
    limit: int,
    cursor: str | None,
    what: str,
) -> tuple[list[T], str | None]:
    """The ``limit`` items after the cursor's key (from the first without one), in key order, and the cursor of
    the next page (None: this is the last)."""
    after = decode_cursor(cursor, shape, what) if cursor else None
    keyed = sorted(((key(item), item) for item in items), key=lambda pair: pair[0])
    start = bisect_right([k for k, _ in keyed], after) if after is not None else 0  # type: ignore[misc]
    page = keyed[start : start + limit]
    more = start + limit < len(keyed)
    return [item for _, item in page], encode_cursor(page[-1][0]) if more and page else None


def microseconds(moment: datetime) -> int:
    """A time as whole microseconds since 1970 (exact, unlike a float of seconds): an order key's part."""
    delta = moment - datetime(1970, 1, 1, tzinfo=moment.tzinfo)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class MessagePage(list[Message]):
    """A page of a session's messages in event-time order: a list of them, with ``next_cursor`` (None: the
    last page)."""

    def __init__(self, messages: Iterable[Message] = (), next_cursor: str | None = None) -> None:
        super().__init__(messages)
        self.next_cursor = next_cursor


HISTORY_KEY = (int, int, str)  # the time in microseconds, the arrival sequence, the message id


def history_page(stored: Iterable[StoredMessage], *, limit: int, cursor: str | None) -> MessagePage:
    """One page of a session's messages (``stored``): by time, then arrival, then id."""

    def key(record: StoredMessage) -> Key:
        return microseconds(record.message.timestamp), record.sequence, record.message.id

    page, next_cursor = page_after(stored, key, shape=HISTORY_KEY, limit=limit, cursor=cursor, what="history")
    return MessagePage([record.message for record in page], next_cursor)
