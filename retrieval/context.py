"""Token-budgeted, cited context for RAG prompts.

The context is made of pieces, one per episode: a header with the episode's absolute date (and
title), then the exact source messages of that episode that earned their place, in order, with
"…" where turns are left out. Messages of the best episodes (by fused vector + BM25 rank of their
records) are chosen by one score that joins these signals:

- the message's own signal: exact cosine with the query + BM25 over the query's best BM25 score;
- its episode's signal (the same for the episode record, its cosine partly taken from the centroid
  of its messages' vectors: the episode's own vector sees only the start of a long episode), so the
  turns of a conversation stretch that is about the query come along;
- its best neighbour's signal, so the answer that follows a matching question is kept;
- a bonus when the query names the message's speaker ("What did Melanie paint?");
- a bonus when the query names a time the message falls in ("... on 3 June, 2023?", "... in June?",
  "... last week?", read against the query's reference time and timezone: retrieval.timewindow);
- a small penalty for a turn that only asks (ends with "?"): the answer after it tells more.

Messages are packed greedily in that order while they fit; pieces are then printed in
chronological order. A piece cites exactly the messages whose text it contains.

Tokens are counted offline as ceil(characters / 4) of the whole text (newlines included), or, when
a wordpiece counter is given, as max(that, wordpieces of the bundled tokenizer): the text never
exceeds the budget by either measure. Characters and wordpieces add up over lines (a newline is
whitespace to the tokenizer), so the packer keeps exact running sums of both and pays no rounding
per line.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memory.models import Episode, Message
from memory.store import message_record_id
from memory.timeutil import format_date, utc_now
from retrieval.search import EPISODE_KINDS, Candidate, Searcher, episode_score, recency_factor
from retrieval.timewindow import time_mentions
from retrieval.types import Citation, ContextQuery, ContextResult

TokenCounter = Callable[[str], int]
HEADER = "Relevant memory, oldest first:"
GAP = "…"


@dataclass(frozen=True, kw_only=True)
class PackingPolicy:
    """How candidates become context; the defaults are what the LoCoMo benchmark supports."""

    depth: int = 200  # records taken from each ranking (vector and BM25)
    max_episodes: int = 40  # episodes whose messages compete for the budget
    keyword_weight: float = 0.5  # BM25 (divided by the query's best BM25 score) added to the cosine
    episode_share: float = 0.8  # weight of the episode's own signal in each of its messages' score
    neighbour_share: float = 0.4  # weight of the best adjacent message's own signal
    titles: bool = False  # print the episode title in each piece's header
    speaker_bonus: float = 0.2  # added to the messages of a speaker the query names
    time_bonus: float = 0.5  # added to the messages from a time the query names
    question_penalty: float = 0.1  # taken from a turn that ends with a question mark
    episode_centroid: float = 0.5  # share of an episode's cosine taken from its messages' centroid


def message_line(message: Message) -> str:
    caption = message.metadata.get("image_caption") if isinstance(message.metadata, dict) else None
    shared = f" [shared an image: {caption}]" if caption else ""
    return f"{message.speaker}: {' '.join(message.content.split())}{shared}"


def named_speakers(query: str, messages: Iterable[Message]) -> set[str]:
    """Speakers (casefolded) whose name is a word of the query: "What did Melanie paint?" names Melanie."""
    text = query.casefold()
    speakers = {m.speaker.casefold() for m in messages}
    return {name for name in speakers if name.strip() and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text)}


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
        self, *, searcher: Searcher, count_wordpieces: TokenCounter | None = None, policy: PackingPolicy | None = None
    ) -> None:
        self._searcher = searcher
        self._wordpieces = count_wordpieces
        self.policy = policy or PackingPolicy()
        # Messages recur across queries: their wordpiece counts are kept (bounded, least recently used out).
        self._line_wordpieces = functools.lru_cache(maxsize=65536)(count_wordpieces or (lambda _line: 0))

    def count(self, text: str) -> int:
        return self._tokens(len(text), self._wordpieces(text) if self._wordpieces is not None else 0)

    @staticmethod
    def _tokens(chars: int, wordpieces: int) -> int:
        return max(math.ceil(chars / 4), wordpieces)

    def _cost(self, lines: list[str]) -> tuple[int, int]:
        """(characters, wordpieces) of the lines, each preceded by its newline."""
        return sum(len(line) + 1 for line in lines), sum(self._line_wordpieces(line) for line in lines)

    def build(self, group_id: str, query: ContextQuery) -> ContextResult:
        policy = self.policy
        candidates = self._searcher.candidates(group_id, query.query, query, depth=policy.depth)
        ranked = self._rank(group_id, candidates, query)
        chars, wordpieces = len(HEADER), self._line_wordpieces(HEADER)
        chosen: dict[str, _Piece] = {}
        piece_cost: dict[str, tuple[int, int]] = {}
        for _score, piece, index in ranked:
            current = chosen.get(piece.episode.uuid)
            trial = _Piece(piece.episode, piece.messages, (current.chosen if current else set()) | {index})
            cost = self._cost(trial.lines(titles=policy.titles))
            before = piece_cost.get(piece.episode.uuid, (0, 0))
            trial_chars, trial_wordpieces = chars + cost[0] - before[0], wordpieces + cost[1] - before[1]
            if self._tokens(trial_chars, trial_wordpieces) > query.token_budget:
                continue
            chosen[piece.episode.uuid] = trial
            piece_cost[piece.episode.uuid] = cost
            chars, wordpieces = trial_chars, trial_wordpieces
        ordered = sorted(chosen.values(), key=lambda p: (p.messages[min(p.chosen)].timestamp, p.episode.uuid))
        if not ordered:
            return ContextResult(text="", citations=[], tokens=0)
        text = "\n".join([HEADER, *(line for piece in ordered for line in piece.lines(titles=policy.titles))])
        tokens = self.count(text)
        if tokens > query.token_budget:  # cannot happen: the running sums are the text's counts
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
        cosine = self._searcher.similarities(group_id, query.query, episodes, episode_centroid=policy.episode_centroid)
        index, keyword = self._searcher.keyword_scores(group_id, query.query)
        top_keyword = float(keyword.max()) if len(keyword) and keyword.max() > 0 else 1.0

        def signal(record_id: str) -> float:
            position = index.positions.get(record_id)
            lexical = float(keyword[position]) / top_keyword if position is not None else 0.0
            return cosine.get(record_id, 0.0) + policy.keyword_weight * lexical

        now = query.reference_time or utc_now()
        named = named_speakers(query.query, (m for items in messages.values() for m in items))
        times = time_mentions(query.query, reference=query.reference_time, timezone=query.timezone)
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
                if message.speaker.casefold() in named:
                    score += policy.speaker_bonus
                if any(mention.covers(message.timestamp) for mention in times):
                    score += policy.time_bonus
                if message.content.rstrip().endswith("?"):
                    score -= policy.question_penalty
                if query.recency_weight > 0:
                    score *= recency_factor(message.timestamp, now, query.recency_weight, query.recency_half_life_days)
                ranked.append((score, piece, position))
        ranked.sort(key=lambda item: (-item[0], item[1].episode.uuid, item[2]))
        return ranked
