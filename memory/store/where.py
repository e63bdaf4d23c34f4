"""Chroma ``where`` clauses evaluated on records already read: a read by id with a filter reads by id alone and
keeps the matching records here. Embedded Chroma evaluates a ``where`` over every record of its database before it
looks at the ids (a read of 100 ids of one session's partition with ``{"kind": "message"}``: 700 ms in a database
of 26,000 records, 7 ms without the filter), so a filter sent with ids costs what the database holds.

Only the operators epimem writes are known (equality, ``$in``, ``$gte``, ``$lt``, ``$lte``, ``$and``); a clause that
``understood`` rejects is sent to Chroma as it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_COMPARISONS = {
    "$gte": lambda value, bound: value >= bound,
    "$lt": lambda value, bound: value < bound,
    "$lte": lambda value, bound: value <= bound,
}


def understood(where: Any) -> bool:
    """Whether ``matches`` can evaluate the clause."""
    if not isinstance(where, Mapping) or not where:
        return False
    for field, condition in where.items():
        if field == "$and":
            if not isinstance(condition, list) or not all(understood(part) for part in condition):
                return False
        elif field.startswith("$"):
            return False
        elif isinstance(condition, Mapping):
            if len(condition) != 1:
                return False
            operator, operand = next(iter(condition.items()))
            if operator == "$in":
                if not isinstance(operand, list):
                    return False
            elif operator not in _COMPARISONS or not isinstance(operand, int | float) or isinstance(operand, bool):
                return False
        elif not isinstance(condition, str | int | float | bool):
            return False
    return True


def matches(metadata: Mapping[str, Any] | None, where: Mapping[str, Any]) -> bool:
    """Whether a record's metadata meets a clause that ``understood`` accepts (a missing field meets nothing)."""
    found = metadata or {}
    for field, condition in where.items():
        if field == "$and":
            if not all(matches(found, part) for part in condition):
                return False
            continue
        if field not in found or found[field] is None:
            return False
        value = found[field]
        if isinstance(condition, Mapping):
            operator, operand = next(iter(condition.items()))
            if operator == "$in":
                if not any(_same(value, option) for option in operand):
                    return False
            elif not _number(value) or not _COMPARISONS[operator](value, operand):
                return False
        elif not _same(value, condition):
            return False
    return True


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(value: Any, wanted: Any) -> bool:
    """Chroma's equality: a string equals a string, a bool a bool, a number a number."""
    if isinstance(wanted, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value == wanted
    if isinstance(wanted, str) or isinstance(value, str):
        return isinstance(value, str) and isinstance(wanted, str) and value == wanted
    return _number(value) and _number(wanted) and value == wanted
