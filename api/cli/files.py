"""What the command line checks before it imports a file or reads a group: the file's kind, every
line of a JSON Lines file (named by its number), and whether a group exists."""

from __future__ import annotations

import json
from pathlib import Path

from api.cli.common import err
from api.facade import Epimem
from memory.errors import InvalidInputError

REQUIRED = ("group_id", "session_id", "id", "content")


def file_kind(path: Path) -> str:
    """``locomo`` (a JSON list), ``export`` (JSON Lines starting with an export header) or ``messages``
    (JSON Lines). A first line that is not JSON is JSON Lines unless the whole file is one JSON document."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            if line.lstrip().startswith("["):
                return "locomo"
            try:
                first = json.loads(line)
            except json.JSONDecodeError:
                return "locomo" if _one_json_document(path) else "messages"
            return "export" if isinstance(first, dict) and first.get("type") == "header" else "messages"
    return "messages"


def _one_json_document(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return True


def check_messages_file(path: Path) -> None:
    """Every line of a messages file is a JSON object with the required fields; the first bad line
    raises ``InvalidInputError`` naming the file type and the line number."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"JSON Lines file {path}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidInputError(f"{where}: not valid JSON ({error.msg}, column {error.colno})") from None
            if not isinstance(record, dict):
                raise InvalidInputError(f"{where}: expected one JSON object per line")
            missing = [name for name in REQUIRED if name not in record]
            if missing:
                raise InvalidInputError(
                    f"{where}: missing field {', '.join(repr(m) for m in missing)} "
                    f"(each line needs {', '.join(REQUIRED)}; timestamp is recommended)"
                )


def note_when_empty(service: Epimem, group_id: str) -> None:
    """A query of a group that holds nothing answers empty, as over HTTP; the note on stderr says why (a typo
    in the group's name, most of the time)."""
    if not service.group_exists(group_id):
        err.print(f"note: group {group_id!r} holds nothing (`epimem stats` lists the groups)", style="yellow")
