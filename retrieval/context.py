"""Token-budgeted, cited context for RAG prompts.

Tokens are counted offline as max(ceil(characters / 4), wordpieces of the bundled tokenizer
when one is given): the text never exceeds the budget by either measure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from memory.models import Episode, Message
from memory.timeutil import format_date
from retrieval.search import Searcher
from retrieval.types import Citation, ContextQuery, ContextResult, SearchQuery

TokenCounter = Callable[[str], int]
HEADER = "Relevant memory (chronological; each piece cites its source):"


def char_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class Piece:
    timestamp: datetime
    text: str
    citation: Citation


def render_episode(episode: Episode) -> str:
    return f"[{format_date(episode.timestamp)} | episode {episode.uuid}] {episode.title}\n{episode.content}"


def render_message(message: Message, episode: Episode) -> str:
    return f"[{format_date(message.timestamp)} | {message.id}] {message.speaker}: {' '.join(message.content.split())}"


class ContextBuilder:
    def __init__(self, *, searcher: Searcher, count_tokens: TokenCounter | None = None) -> None:
        self._searcher = searcher
        self._wordpieces = count_tokens

    def count(self, text: str) -> int:
        tokens = char_tokens(text)
        if self._wordpieces is not None:
            tokens = max(tokens, self._wordpieces(text))
        return tokens

    def build(self, group_id: str, query: ContextQuery) -> ContextResult:
        search = SearchQuery(
            query=query.query,
            k=50,
            session_ids=query.session_ids,
            start=query.start,
            end=query.end,
            time=query.time,
            reference_time=query.reference_time,
            timezone=query.timezone,
            recency_weight=query.recency_weight,
        )
        hits = self._searcher.search(group_id, search)
        budget = query.token_budget - self.count(HEADER) - 1
        pieces: list[Piece] = []
        used_messages: set[tuple[str, str]] = set()
        for hit in hits:
            episode = hit.episode
            whole = render_episode(episode)
            cost = self.count(whole) + 1
            if cost <= budget and not any((episode.session_id, m) in used_messages for m in episode.source_message_ids):
                pieces.append(
                    Piece(
                        episode.timestamp,
                        whole,
                        Citation(
                            episode_id=episode.uuid,
                            session_id=episode.session_id,
                            timestamp=episode.timestamp,
                            message_ids=list(episode.source_message_ids),
                        ),
                    )
                )
                used_messages |= {(episode.session_id, m) for m in episode.source_message_ids}
                budget -= cost
                continue
            # The episode does not fit: keep the exact messages that matched.
            wanted = [m for m in hit.matched_message_ids if (episode.session_id, m) not in used_messages]
            if not wanted:
                continue
            stored = self._searcher.source_messages(group_id, episode)
            for message in stored:
                if message.id not in wanted:
                    continue
                text = render_message(message, episode)
                cost = self.count(text) + 1
                if cost > budget:
                    continue
                pieces.append(
                    Piece(
                        message.timestamp,
                        text,
                        Citation(
                            episode_id=episode.uuid,
                            session_id=episode.session_id,
                            timestamp=message.timestamp,
                            message_ids=[message.id],
                        ),
                    )
                )
                used_messages.add((episode.session_id, message.id))
                budget -= cost
            if budget <= 0:
                break
        pieces.sort(key=lambda piece: piece.timestamp)
        text = "\n".join([HEADER, *(piece.text for piece in pieces)]) if pieces else ""
        return ContextResult(
            text=text, citations=[piece.citation for piece in pieces], tokens=self.count(text) if text else 0
        )
