"""``epimem segment FILE.jsonl``: where episodes would end, gap by gap, without storing anything.

Reads messages in the import JSON Lines format (``group_id``, ``session_id``, ``id``, ``content``,
``timestamp``, ``producer_id``, ...), embeds them with the configured model, and scores every gap
between consecutive messages of a session (in event-time order) with the heuristic segmenter the
settings select (``EPIMEM_SEGMENTATION_METHOD``, the size bounds, the time gap, the target). With
``--json``: one JSON object per gap, ``{"group_id", "session_id", "after_id", "before_id",
"score", "boundary", "reason"}``; ``reason`` is the boundary reason where an episode would end,
else null. No LLM is called, even where one is configured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.common import fail
from epimem_client.errors import EpimemError, InvalidInputError

if TYPE_CHECKING:  # the model and the segmenter load for this command only
    from memory.episodes.segmentation import GapDecision

REQUIRED = ("group_id", "session_id", "id", "content")


def check_lines(path: Path) -> None:
    """Every non-blank line is a JSON object with the required fields; the first bad one raises
    ``InvalidInputError`` naming its number."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidInputError(f"{path}, line {number}: not valid JSON ({error.msg})") from None
            missing = [name for name in REQUIRED if not isinstance(record, dict) or name not in record]
            if missing:
                raise InvalidInputError(
                    f"{path}, line {number}: missing {', '.join(missing)} (each line needs "
                    f"{', '.join(REQUIRED)}; timestamp and producer_id are recommended)"
                )


def gap_record(group_id: str, session_id: str, decision: GapDecision) -> dict[str, object]:
    return {
        "group_id": group_id,
        "session_id": session_id,
        "after_id": decision.after.id,
        "before_id": decision.before.id,
        "score": round(decision.score, 4),
        "boundary": decision.boundary,
        "reason": decision.reason.value if decision.reason is not None else None,
    }


def segment(
    file: Annotated[Path, typer.Argument(help="messages in the import JSON Lines format", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per gap")] = False,
) -> None:
    """Score every gap between consecutive messages and show where episodes would end (stores nothing)."""
    from api.settings import load_settings
    from memory.ingest.importers import read_jsonl
    from memory.text import message_line

    settings = load_settings()
    try:
        if not file.is_file():
            raise FileNotFoundError(f"no such file: {file}")
        check_lines(file)
        batches = list(read_jsonl(file))
    except EpimemError as error:
        fail(error.message, 2, code=error.code)
    except (FileNotFoundError, UnicodeDecodeError) as error:
        fail(str(error), 2)
    from api.composition import lazy_embedder, segmentation_policy
    from memory.episodes.segmentation import decide_gaps

    embedder = lazy_embedder(settings)
    policy = segmentation_policy(settings)
    for group_id, session_id, messages in batches:
        vectors = embedder.embed_batch([message_line(m) for m in messages])
        for decision in decide_gaps(messages, policy=policy, vectors=vectors):
            record = gap_record(group_id, session_id, decision)
            if as_json:
                typer.echo(json.dumps(record))
            else:
                mark = f"| {record['reason']}" if decision.boundary else ""
                typer.echo(
                    f"{group_id}/{session_id}  {decision.after.id} -> {decision.before.id}  "
                    f"{decision.score:.3f} {'#' * round(decision.score * 20):<20} {mark}"
                )


def register(app: typer.Typer) -> None:
    app.command("segment")(segment)
