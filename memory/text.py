"""How a message or an episode is written as one piece of text: for its vector, in context blocks,
in offline episodes and in LLM prompts. One rule each, used everywhere."""

from __future__ import annotations

import re

from memory.models import Episode, Message

# A message's second and later lines in a context are indented by this: no line of a message can then be read as
# a marker, a date line or another message.
INDENT = "  "
TAB_WIDTH = 4
LINE_ENDS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines cuts
_LINE_BREAK = re.compile(f"[{LINE_ENDS}]")

# What is embedded for an episode: the title and the lead of the content. The model reads at
# most 256 wordpieces; every message is embedded on its own too, so nothing is lost.
EPISODE_EMBED_CHARS = 1000


def squash(text: str) -> str:
    """Runs of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def clip(text: str, limit: int | None) -> str:
    """Squashed, and cut to ``limit`` characters with an ellipsis (no limit: whole)."""
    text = squash(text)
    return text if limit is None or len(text) <= limit else text[: limit - 1].rstrip() + "…"


def image_note(message: Message, *, limit: int | None = None) -> str:
    """' [shared an image: <caption>]' for a message that shared a captioned image, else ''."""
    caption = message.metadata.get("image_caption") if isinstance(message.metadata, dict) else None
    return f" [shared an image: {clip(str(caption), limit)}]" if caption else ""


def message_line(message: Message) -> str:
    """'Speaker: what they said [shared an image: …]' on one line — the text of a message's vector."""
    return f"{message.speaker}: {squash(message.content)}{image_note(message)}"


def shown_lines(text: str) -> str:
    """``text`` as a context shows it: its non-blank lines, runs of whitespace inside each as one space, the first
    without its indentation, the others indented by ``INDENT`` plus their indentation beyond the least of all
    (a tab is ``TAB_WIDTH`` columns): a code block keeps its shape."""
    if not _LINE_BREAK.search(text):  # one line (most messages): as squash, without cutting it into lines
        return squash(text)
    rows: list[tuple[int, str]] = []
    for raw in text.splitlines():
        words = raw.split()
        if words:
            lead = raw[: len(raw) - len(raw.lstrip())]
            rows.append((len(lead) + (TAB_WIDTH - 1) * lead.count("\t"), " ".join(words)))
    if not rows:
        return ""
    common = min(width for width, _line in rows)
    return "\n".join([rows[0][1], *(INDENT + " " * (width - common) + line for width, line in rows[1:])])


def line_start(text: str, index: int) -> int:
    """Where the line that holds ``text[index]`` begins (lines as ``str.splitlines`` cuts them)."""
    return max(text.rfind(end, 0, index) for end in LINE_ENDS) + 1


def context_line(message: Message) -> str:
    """A whole message as a context shows it: 'Speaker: text [shared an image: …]', the text's lines kept
    (``shown_lines``)."""
    return f"{message.speaker}: {shown_lines(message.content)}{image_note(message)}"


def episode_embedding_text(episode: Episode) -> str:
    return f"{episode.title}\n{episode.content}"[:EPISODE_EMBED_CHARS]
