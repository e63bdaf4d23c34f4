"""Token-budgeted, cited context for RAG prompts.

The context is made of pieces, one per episode: a header with the episode's absolute date (and
title), then the exact source messages of that episode that earned their place, in order, with
"…" where turns are left out. Messages of the best episodes are scored as retrieval.scoring says
(the message's own match, its episode's, its neighbour's, the speakers and times the query names).

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memory.models import Episode, Message
from memory.text import message_line
from memory.timeutil import format_date
from memory.tracing import read_attributes, traced
from retrieval.names import named_in
from retrieval.scoring import ScoringPolicy, score_messages
from retrieval.search import Candidate, Searcher
from retrieval.types import Citation, ContextQuery, ContextResult

TokenCounter = Callable[[str], int]
HEADER = "Relevant memory, oldest first:"
GAP = "…"


@dataclass(frozen=True, kw_only=True)
class PackingPolicy(ScoringPolicy):
    """How candidates become context: the message score's weights, and whether headers carry titles."""

    titles: bool = False  # print the episode title in each piece's header


def named_speakers(query: str, messages: Iterable[Message], names: dict[str, set[str]] | None = None) -> set[str]:
    """Speakers (casefolded) the query names by id or by another name of theirs ("What did Melanie
    paint?" names Melanie; with names {"emi": {"kate"}}, "Kate's hobbies" names emi)."""
    return named_in(query, {m.speaker for m in messages}, names)


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


class _LineCosts:
    """(characters, wordpieces) of a piece's lines, from the cost of each of its lines, each line
    priced once per build (a piece is priced again for every message tried in it)."""

    def __init__(self, cost: Callable[[list[str]], tuple[int, int]], *, titles: bool) -> None:
        self._cost = cost
        self._titles = titles
        self._gap = cost([GAP])
        self._lines: dict[tuple[str, int], tuple[int, int]] = {}
        self._headers: dict[tuple[str, int], tuple[int, int]] = {}

    def of(self, piece: _Piece) -> tuple[int, int]:
        indices = sorted(piece.chosen)
        uuid = piece.episode.uuid
        key = (uuid, indices[0])
        if key not in self._headers:
            self._headers[key] = self._cost(
                [piece_header(piece.episode, piece.messages[indices[0]], titles=self._titles)]
            )
        chars, wordpieces = self._headers[key]
        for position, index in enumerate(indices):
            if position and index != indices[position - 1] + 1:
                chars, wordpieces = chars + self._gap[0], wordpieces + self._gap[1]
            line = self._lines.get((uuid, index))
            if line is None:
                line = self._lines[(uuid, index)] = self._cost([message_line(piece.messages[index])])
            chars, wordpieces = chars + line[0], wordpieces + line[1]
        return chars, wordpieces


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

    @traced("epimem.context.pack", read_attributes, lambda r: {"tokens": r.tokens, "pieces": len(r.citations)})
    def build(self, group_id: str, query: ContextQuery) -> ContextResult:
        policy = self.policy
        query = self._searcher.resolve_names(group_id, query, policy)
        candidates = self._searcher.candidates(group_id, query.query, query, depth=policy.depth)
        ranked = self._rank(group_id, candidates, query)
        chars, wordpieces = len(HEADER), self._line_wordpieces(HEADER)
        costs = _LineCosts(self._cost, titles=policy.titles)
        chosen: dict[str, _Piece] = {}
        piece_cost: dict[str, tuple[int, int]] = {}
        for _score, piece, index in ranked:
            current = chosen.get(piece.episode.uuid)
            trial = _Piece(piece.episode, piece.messages, (current.chosen if current else set()) | {index})
            cost = costs.of(trial)
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
        # The running sums are the text's counts (lines add up; tests compare them with count(text)).
        tokens = self._tokens(chars, wordpieces)
        if tokens > query.token_budget or chars != len(text):  # cannot happen
            raise AssertionError(
                f"context of {tokens} tokens ({len(text)} chars) against the budget {query.token_budget}"
            )
        return ContextResult(text=text, citations=[piece.citation() for piece in ordered], tokens=tokens)

    def _rank(self, group_id: str, candidates: list[Candidate], query: ContextQuery) -> list[tuple[float, _Piece, int]]:
        """Every message of the best episodes with its score, best first."""
        ranked: list[tuple[float, _Piece, int]] = []
        for scored in score_messages(self._searcher, group_id, candidates, query, self.policy):
            piece = _Piece(scored.episode, scored.messages, set())
            ranked += [(score, piece, position) for position, score in enumerate(scored.scores)]
        ranked.sort(key=lambda item: (-item[0], item[1].episode.uuid, item[2]))
        return ranked
