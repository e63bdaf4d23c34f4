"""Reading the files ``epimem import`` takes, before anything is sent: the file's kind, every line of a JSON
Lines file of messages (a bad one named by its number), the group an export names."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from epimem_client.errors import InvalidInputError

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


def exported_group(path: Path) -> str:
    """The group an export's header names."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                header = json.loads(line)
                return str(header.get("group_id") or "")
    return ""


def message_batches(path: Path, group: str | None) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """A JSON Lines file of messages as (group_id, session_id, messages) batches in file order, each line
    checked first: a JSON object with the required fields, or ``InvalidInputError`` naming the line. The
    messages' own fields are checked where they are added (the server, or the facade)."""
    batches: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
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
            group_id, session_id = str(record.pop("group_id")), str(record.pop("session_id"))
            batches[(group or group_id, session_id)].append(record)
    return [(group_id, session_id, messages) for (group_id, session_id), messages in batches.items()]
