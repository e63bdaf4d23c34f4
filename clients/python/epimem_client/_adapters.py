"""What the framework adapters (``epimem_client.langchain``, ``epimem_client.llamaindex``) share: the memory
they talk to, scope options, context pieces and stable message ids. No framework import here."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any, Protocol

from epimem_client.models import Citation, ContextResult, Message, MessagePage, SearchHit

# A message's roles (the server's ``Role`` values).
USER, ASSISTANT, SYSTEM, TOOL = "user", "assistant", "system", "tool"

# A day's date line in a context text ("[8 May 2023]"): it comes before the day's first piece.
_DAY_LINE = re.compile(r"^\[\d{1,2} \w+ \d{4}\]$")


class Memory(Protocol):
    """``EpimemClient`` and the server's in-process facade ``Epimem`` both fit (the facade returns the server's
    models, with the same fields as the client's)."""

    def search(self, group_id: str, query: Any, **options: Any) -> list[SearchHit]: ...
    def context(self, group_id: str, query: Any, **options: Any) -> ContextResult: ...
    def add_messages(self, group_id: str, session_id: str, messages: Any) -> Any: ...
    def flush(self, group_id: str, session_id: str) -> Any: ...
    def history(self, group_id: str, session_id: str, *, limit: int = ..., cursor: str | None = ...) -> MessagePage: ...
    def delete_session(self, group_id: str, session_id: str) -> Any: ...


def scope_options(
    session_ids: list[str] | None,
    time: str | None,
    reference_time: datetime | None,
    wanted: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The scope of a recall call; ``wanted`` is a recall filter (speakers, roles, episode_types, metadata)."""
    options = {"session_ids": session_ids, "time": time, "reference_time": reference_time, "filter": wanted}
    return {key: value for key, value in options.items() if value is not None}


def hit_metadata(hit: SearchHit) -> dict[str, Any]:
    episode = hit.episode
    return {
        "episode_id": episode.uuid,
        "session_id": episode.session_id,
        "timestamp": episode.timestamp.isoformat(),
        "score": float(hit.score),
        "source_message_ids": list(episode.source_message_ids),
        "title": episode.title,
        "pending": hit.pending,
    }


def hit_text(hit: SearchHit) -> str:
    return f"{hit.episode.title}\n{hit.episode.content}"


def context_pieces(result: ContextResult) -> list[tuple[str, Citation | None]]:
    """The context block cut into its cited pieces (one per episode, oldest first), each from the line its
    marker opens ("[1] ...") to the next piece, under the date line of its day (a message's further lines,
    indented, stay in its piece). If the text cannot be matched to its citations, one piece with the whole text."""
    whole: list[tuple[str, Citation | None]] = [(result.text, None)] if result.text else []
    citations = result.citations
    blocks: list[list[str]] = []
    day: list[str] = []
    for line in result.text.splitlines()[1:]:  # the first line is the block's header
        following = citations[len(blocks)] if len(blocks) < len(citations) else None
        if following is not None and following.marker and line.startswith(f"{following.marker} "):
            blocks.append([*day, line])
        elif _DAY_LINE.match(line):
            day = [line]
        elif blocks:
            blocks[-1].append(line)
        else:
            return whole
    if len(blocks) != len(citations):
        return whole
    return [("\n".join(block), citation) for block, citation in zip(blocks, citations, strict=True)]


def citation_metadata(citation: Citation | None) -> dict[str, Any]:
    if citation is None:
        return {}
    return {
        "marker": citation.marker,
        "episode_id": citation.episode_id,
        "session_id": citation.session_id,
        "timestamp": citation.timestamp.isoformat(),
        "source_message_ids": list(citation.message_ids),
        "pending": citation.pending,
        "excerpts": [excerpt.model_dump() for excerpt in citation.excerpts],
    }


def stable_id(session_id: str, role: str, content: str, position: int) -> str:
    """An id for a framework message that has none: the same message at the same place of the
    same batch always gets the same id, so re-adding it is a no-op."""
    digest = hashlib.sha256(f"{session_id}\x1f{role}\x1f{position}\x1f{content}".encode()).hexdigest()
    return f"fw-{digest[:24]}"


def full_history(memory: Memory, group_id: str, session_id: str, page: int = 100) -> list[Message]:
    messages: list[Message] = []
    cursor: str | None = None
    while True:
        batch = memory.history(group_id, session_id, limit=page, cursor=cursor)
        messages.extend(batch)
        if (cursor := batch.next_cursor) is None:
            return messages


def add_new(memory: Memory, group_id: str, session_id: str, batch: list[dict[str, Any]]) -> None:
    """Add the messages whose ids the session does not hold yet. A framework resends messages
    without timestamps, which the server would stamp anew: skipping known ids keeps re-adding a
    no-op on any server version."""
    known = {message.id for message in full_history(memory, group_id, session_id)}
    fresh = [entry for entry in batch if entry["id"] not in known]
    if fresh:
        memory.add_messages(group_id, session_id, fresh)
