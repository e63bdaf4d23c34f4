"""Token-budgeted, cited context for RAG prompts.

The context is made of pieces, one per episode: a header with the episode's absolute date (and
title), then the exact source messages of that episode that earned their place, in order, with
"…" where turns are left out. Messages are chosen by one ranking that joins three signals:

- the message's own fused rank (vector + BM25) among all the group's records;
- its episode's standing (the episode's own record and its other matching messages), so the
  turns of a conversation stretch that is about the query come along;
- its neighbours' standing, so the answer that follows a matching question is kept.

Messages are packed greedily in that order while they fit; pieces are then printed in
chronological order. A piece cites exactly the messages whose text it contains.

Tokens are counted offline as max(ceil(characters / 4), wordpieces of the bundled tokenizer when
one is given): the text never exceeds the budget by either measure. Both measures add up over
lines, so the packer counts each piece on its own and the sum bounds the whole text.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from memory.models import Episode, Message
from memory.store import message_record_id
from memory.timeutil import format_date, utc_now
from retrieval.search import EPISODE_KINDS, Candidate, Searcher, episode_score, recency_factor
from retrieval.types import Citation, ContextQuery, ContextResult

TokenCounter = Callable[[str], int]
HEADER = "Relevant memory, oldest first:"
GAP = "…"


def char_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, kw_only=True)
class PackingPolicy:
    """How candidates become context; the defaults are what the LoCoMo benchmark supports."""

    depth: int = 200  # records taken from each ranking (vector and BM25)
    max_episodes: int = 40  # episodes whose messages compete for the budget
    keyword_weight: float = 1.0  # BM25 (divided by the query's best BM25 score) added to the cosine
    episode_share: float = 0.5  # weight of the episode's own signal in each of its messages' score
    neighbour_share: float = 0.5  # weight of the best adjacent message's own signal
    titles: bool = False  # print the episode title in each piece's header


def message_line(message: Message) -> str:
    caption = message.metadata.get("image_caption") if isinstance(message.metadata, dict) else None
    shared = f" [shared an image: {caption}]" if caption else ""
    return f"{message.speaker}: {' '.join(message.content.split())}{shared}"


def piece_header(episode: Episode, first: Message, *, titles: bool) -> str:
    date = format_date(first.timestamp)
    return f"[{date}] {episode.title}" if titles else f"[{date}]"


@dataclass
class _Piece:
    episode: Episode
    messages: list[Message]  # all source messages of the episode, in order
    chosen: set[int]

    def lines(self, *, titles: bool) -> list[str]:
        indices = sorted(self.chosen)
        lines = [piece_header(self.episode, self.messages[indices[0]], titles=titles)]
        for position, index in enumerate(indices):
            if position and index != indices[position - 1] + 1:
                lines.append(GAP)
            lines.append(message_line(self.messages[index]))
        return lines

    def citation(self) -> Citation:
        indices = sorted(self.chosen)
        return Citation(
            episode_id=self.episode.uuid,
            session_id=self.episode.session_id,
            timestamp=self.messages[indices[0]].timestamp,
            message_ids=[self.messages[i].id for i in indices],
        )


class ContextBuilder:
    def __init__(
        self, *, searcher: Searcher, count_tokens: TokenCounter | None = None, policy: PackingPolicy | None = None
    ) -> None:
        self._searcher = searcher
        self._wordpieces = count_tokens
        self.policy = policy or PackingPolicy()
        # Messages recur across queries: their line costs are kept (bounded, least recently used out).
        self._line_cost = functools.lru_cache(maxsize=65536)(self._uncached_line_cost)

    def count(self, text: str) -> int:
        tokens = char_tokens(text)
        if self._wordpieces is not None:
            tokens = max(tokens, self._wordpieces(text))
        return tokens

    def _uncached_line_cost(self, line: str) -> int:
        return self.count(line) + 1

    def _cost(self, lines: list[str]) -> int:
        """Tokens of the lines, +1 each for the newline before it."""
        return sum(self._line_cost(line) for line in lines)

    def build(self, group_id: str, query: ContextQuery) -> ContextResult:
        policy = self.policy
        candidates = self._searcher.candidates(group_id, query.query, query, depth=policy.depth)
        pieces = self._rank(group_id, candidates, query)
        budget = query.token_budget - self.count(HEADER)
        used = 0
        chosen: dict[str, _Piece] = {}
        piece_cost: dict[str, int] = {}
        for _score, piece, index in pieces:
            current = chosen.get(piece.episode.uuid)
            trial = _Piece(piece.episode, piece.messages, (current.chosen if current else set()) | {index})
            cost = self._cost(trial.lines(titles=policy.titles))
            extra = cost - piece_cost.get(piece.episode.uuid, 0)
            if used + extra > budget:
                continue
            chosen[piece.episode.uuid] = trial
            piece_cost[piece.episode.uuid] = cost
            used += extra
        ordered = sorted(chosen.values(), key=lambda p: (p.messages[min(p.chosen)].timestamp, p.episode.uuid))
        if not ordered:
            return ContextResult(text="", citations=[], tokens=0)
        text = "\n".join([HEADER, *(line for piece in ordered for line in piece.lines(titles=policy.titles))])
        tokens = self.count(text)
        if tokens > query.token_budget:  # cannot happen: per-line counts bound the total
            raise AssertionError(f"context of {tokens} tokens exceeds the budget {query.token_budget}")
        return ContextResult(text=text, citations=[piece.citation() for piece in ordered], tokens=tokens)

    def _rank(self, group_id: str, candidates: list[Candidate], query: ContextQuery) -> list[tuple[float, _Piece, int]]:
        """Every message of the best episodes with its score, best first."""
        policy = self.policy
        by_episode: dict[str, list[Candidate]] = defaultdict(list)
        for candidate in candidates:
            by_episode[candidate.episode_id].append(candidate)
        standing = {episode_id: episode_score(items) for episode_id, items in by_episode.items()}
        best = sorted(standing, key=lambda e: (-standing[e], e))[: policy.max_episodes]
        episodes = [
            e
            for e in self._searcher.load_episodes(group_id, best).values()
            if e.episode_type.value in EPISODE_KINDS and not e.source_episode_ids
        ]
        messages = self._searcher.messages_of(group_id, episodes)
        # Exact signals for every message of those episodes, whether or not it made a candidate list.
        cosine = self._searcher.similarities(group_id, query.query, episodes)
        index, keyword = self._searcher.keyword_scores(group_id, query.query)
        top_keyword = float(keyword.max()) if len(keyword) and keyword.max() > 0 else 1.0

        def signal(record_id: str) -> float:
            position = index.positions.get(record_id)
            lexical = float(keyword[position]) / top_keyword if position is not None else 0.0
            return cosine.get(record_id, 0.0) + policy.keyword_weight * lexical

        now = query.reference_time or utc_now()
        ranked: list[tuple[float, _Piece, int]] = []
        for episode in episodes:
            items = messages.get(episode.uuid, [])
            if not items:
                continue
            piece = _Piece(episode, items, set())
            topic = signal(episode.uuid)
            own = [signal(message_record_id(episode.session_id, m.id)) for m in items]
            for position, message in enumerate(items):
                neighbours = [own[j] for j in (position - 1, position + 1) if 0 <= j < len(items)]
                score = (
                    own[position] + policy.episode_share * topic + policy.neighbour_share * max(neighbours, default=0.0)
                )
                if query.recency_weight > 0:
                    score *= recency_factor(message.timestamp, now, query.recency_weight, query.recency_half_life_days)
                ranked.append((score, piece, position))
        ranked.sort(key=lambda item: (-item[0], item[1].episode.uuid, item[2]))
        return ranked
