"""How a message or an episode is written as one piece of text: for its vector, in context blocks,
in offline episodes and in LLM prompts. One rule each, used everywhere."""

from __future__ import annotations

from memory.models import Episode, Message

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
    """'Speaker: what they said [shared an image: …]' — the text of a message's vector and its line
    in a context block."""
    return f"{message.speaker}: {squash(message.content)}{image_note(message)}"


def episode_embedding_text(episode: Episode) -> str:
    return f"{episode.title}\n{episode.content}"[:EPISODE_EMBED_CHARS]
