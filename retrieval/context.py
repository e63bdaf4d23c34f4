"""Token-budgeted, cited context for RAG prompts.

The context is made of pieces, one per episode: the source messages of that episode that earned their place, in
order, with "…" where turns are left out, a long message as its excerpt for the query (retrieval.excerpts). Each
piece opens with its marker, "[1]", "[2]", ... in the order of the text, which is the order of the citations
(citation i is marker [i + 1]): a prompt built from the text carries its sources. Each day's pieces come under one
date line ("[8 May 2023]"). Messages are scored as retrieval.scoring says and
packed greedily in that order (less a length penalty and, of two near-equal matches, a little less for the newer
one: retrieval.packing_order) while they fit; pieces are then printed in chronological order. A piece cites exactly the
messages whose text (or excerpt, with its span) it contains.

Tokens are counted offline as ceil(characters / 4) of the whole text (newlines included), or, when
a wordpiece counter is given, as max(that, wordpieces of the bundled tokenizer): the text never
exceeds the budget by either measure. Characters and wordpieces add up over lines (a newline is
whitespace to the tokenizer), so the packer keeps exact running sums of both and pays no rounding
per line. A marker is followed by a space and the tokenizer splits on brackets and spaces, so a marked line
costs its marker plus the line; the markers of N pieces are [1]..[N] whichever piece holds which, so the
packer prices marker N + 1 when it opens a piece.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from memory.embedding.embedder import ServiceEmbedder
from memory.models import Episode, Message
from memory.readmodel.model import ReadModel
from memory.readmodel.open_episodes import is_pending
from memory.timeutil import to_utc
from memory.tracing import group_hash, traced
from retrieval.analysis import Request, understand
from retrieval.candidates import Candidate, candidates
from retrieval.excerpts import MessageLines
from retrieval.filters import filter_match
from retrieval.message_rows import group_rows
from retrieval.names import named_in
from retrieval.packing_order import packing_order
from retrieval.policy import ScoringPolicy
from retrieval.scoring import DERIVED, score_messages
from retrieval.types import Citation, ContextQuery, ContextResult, Excerpt

TokenCounter = Callable[[str], int]
HEADER = "Relevant memory, oldest first:"
GAP = "…"


@dataclass(frozen=True, kw_only=True)
class PackingPolicy(ScoringPolicy):
    """How candidates become context: the message score's weights, and how messages are packed."""

    # The speaker prior never buries a message that outscores all of the named speakers' by more than a margin:
    # speaker_cap_margin up to cap_budget tokens, then times (cap_budget / B) ** cap_decay at a budget of B
    # (0.096 at 1,000, 0.024 at 2,000; chosen held out on LoCoMo's wrong-person questions; search keeps its own).
    speaker_cap: bool = True
    speaker_cap_margin: float = 0.15
    cap_budget: int | None = 800
    cap_decay: float = 2.0
    # What lowers a message's place in the order the packer is offered messages (retrieval.packing_order):
    # ``length_penalty`` x its length in hundreds of characters (a long message must match better to take the
    # room of two short ones), ``primacy`` x the share of those offered that are older than it (not when the
    # query asks for recent messages). Both chosen held out in every fold.
    length_penalty: float = 0.02
    primacy: float = 0.1
    # A message longer than this many tokens (characters / 4) is packed as an excerpt of at most as many: the
    # part that matters to the query (retrieval.excerpts), cited with its span (None: messages whole; 64 was
    # chosen held out by dataset on LoCoMo, REALTALK and BEAM).
    excerpt_tokens: int | None = 64

    def at_budget(self, budget: int) -> PackingPolicy:
        """The policy a context of ``budget`` tokens is scored with (cap_budget)."""
        if self.cap_budget is None or budget <= self.cap_budget:
            return self
        return replace(self, speaker_cap_margin=self.speaker_cap_margin * (self.cap_budget / budget) ** self.cap_decay)


def named_speakers(query: str, messages: Iterable[Message], names: dict[str, set[str]] | None = None) -> set[str]:
    """Speakers (casefolded) the query names by id or by another name of theirs ("What did Melanie
    paint?" names Melanie; with names {"emi": {"kate"}}, "Kate's hobbies" names emi)."""
    return named_in(query, {m.speaker for m in messages}, names)


def marker(number: int) -> str:
    """The marker of the ``number``-th piece (1-based): '[1]'."""
    return f"[{number}]"


def day_header(moment: datetime) -> str:
    """The date line of a day's pieces: '[8 May 2023]' (UTC, as the rest of the context)."""
    moment = to_utc(moment)
    return f"[{moment.day} {moment:%B %Y}]"


@dataclass
class _Piece:
    episode: Episode
    messages: list[Message]  # all source messages of the episode, in order
    chosen: set[int]
    texts: MessageLines

    def line(self, index: int) -> str:
        return self.texts.of(self.episode, index, self.messages[index])[0]

    @property
    def first(self) -> Message:
        return self.messages[min(self.chosen)]

    def marked_body(self, number: int) -> list[str]:
        """The body, its first line opening with the piece's marker (under a day's date line)."""
        first, *rest = self.body()
        return [f"{marker(number)} {first}", *rest]

    def body(self) -> list[str]:
        """The chosen messages' lines, with a gap line where turns are left out."""
        indices = sorted(self.chosen)
        lines: list[str] = []
        for position, index in enumerate(indices):
            if position and index != indices[position - 1] + 1:
                lines.append(GAP)
            lines.append(self.line(index))
        return lines

    def citation(self, number: int) -> Citation:
        indices = sorted(self.chosen)
        return Citation(
            marker=marker(number),
            episode_id=self.episode.uuid,
            session_id=self.episode.session_id,
            timestamp=self.messages[indices[0]].timestamp,
            message_ids=[self.messages[i].id for i in indices],
            pending=is_pending(self.episode),
            excerpts=[
                Excerpt(message_id=self.messages[i].id, start=span[0], end=span[1])
                for i in indices
                if (span := self.texts.of(self.episode, i, self.messages[i])[1]) is not None
            ],
        )


class _LineCosts:
    """Characters and wordpieces of a piece's lines, from those of each of its lines, each line's characters
    counted once per build and its wordpieces only when its characters fit (a piece is priced again for every
    message tried in it)."""

    def __init__(self, count_wordpieces: Callable[[str], int]) -> None:
        self._count = count_wordpieces
        self._gap = (len(GAP) + 1, count_wordpieces(GAP))
        self._chars: dict[tuple[str, int], int] = {}
        self._wordpieces: dict[tuple[str, int], int] = {}

    def chars(self, piece: _Piece) -> int:
        """The characters of the piece's lines, each preceded by its newline."""
        return self._total(piece, self._chars, lambda line: len(line) + 1, self._gap[0])

    def wordpieces(self, piece: _Piece) -> int:
        return self._total(piece, self._wordpieces, self._count, self._gap[1])

    @staticmethod
    def _total(piece: _Piece, known: dict[tuple[str, int], int], measure: Callable[[str], int], gap: int) -> int:
        """The sum of ``measure`` over the piece's lines (each measured once, kept in ``known``), gap lines included."""
        total = 0
        for index, gap_before in _lines_of(piece):
            key = (piece.episode.uuid, index)
            if key not in known:
                known[key] = measure(piece.line(index))
            total += known[key] + (gap if gap_before else 0)
        return total


def _lines_of(piece: _Piece) -> list[tuple[int, bool]]:
    """The chosen messages in order, each with whether a gap line comes before it."""
    indices = sorted(piece.chosen)
    return [(index, bool(position) and index != indices[position - 1] + 1) for position, index in enumerate(indices)]


def _attributes(_builder: Any, group_id: str, query: ContextQuery) -> dict[str, Any]:
    return {"group_hash": group_hash(group_id), "budget": query.token_budget}


class ContextBuilder:
    """Context for a prompt: a straight pipeline over one reader of the group (memory.readmodel): the query
    understood, candidates (unless the whole group's messages are scored), messages scored, packed."""

    def __init__(
        self,
        *,
        read_model: ReadModel,
        embedder: ServiceEmbedder,
        count_wordpieces: TokenCounter | None = None,
        policy: PackingPolicy | None = None,
    ) -> None:
        self.read_model = read_model
        self._embedder = embedder
        read_model.register(*DERIVED)
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

    @traced("epimem.context.pack", _attributes, lambda r: {"tokens": r.tokens, "pieces": len(r.citations)})
    def build(self, group_id: str, query: ContextQuery) -> ContextResult:
        policy = self.policy.at_budget(query.token_budget)
        # What this request reads: one version of the group for the whole request, other servers' writes too.
        group = self.read_model.reader(group_id, fresh=True)
        # Scoring the whole group's messages needs no candidate ranking (one vector query less).
        whole_group = policy.select == "group" and group_rows(group) is not None
        request = understand(group, query, policy)
        found = [] if whole_group else candidates(request, self._embedder, depth=policy.depth)
        ranked, values = self._rank(request, found, policy)
        packer = _Packer(self)
        primacy = policy.primacy if query.recency_weight <= 0 else 0.0  # the query asks for recent: not older
        order = packing_order(
            values,
            lengths=[len(piece.messages[i].content) for piece, i in ranked],
            length_penalty=policy.length_penalty,
            times=[piece.messages[i].timestamp.timestamp() for piece, i in ranked] if primacy else [],
            primacy=primacy,
        )
        for n in order:
            packer.add(*ranked[n], query.token_budget)
        ordered = sorted(packer.chosen.values(), key=lambda p: (p.first.timestamp, p.episode.uuid))
        if not ordered:
            return ContextResult(text="", citations=[], tokens=0)
        text = "\n".join([HEADER, *self._lines(ordered)])
        # The running sums are the text's counts (lines add up; tests compare them with count(text)).
        tokens = packer.tokens
        if tokens > query.token_budget or packer.chars != len(text):  # cannot happen
            raise AssertionError(
                f"context of {tokens} tokens ({len(text)} chars) against the budget {query.token_budget}"
            )
        citations = [piece.citation(number) for number, piece in enumerate(ordered, start=1)]
        return ContextResult(text=text, citations=citations, tokens=tokens)

    def _lines(self, ordered: list[_Piece]) -> list[str]:
        """Each day's date line, then its pieces, each opening with its marker."""
        lines: list[str] = []
        last = None
        for number, piece in enumerate(ordered, start=1):
            day = day_header(piece.first.timestamp)
            lines += [day] if day != last else []
            lines += piece.marked_body(number)
            last = day
        return lines

    def _marker_cost(self, number: int) -> tuple[int, int]:
        """(characters, wordpieces) of the ``number``-th piece's marker and the space after it."""
        return len(marker(number)) + 1, self._line_wordpieces(marker(number))

    def _day_change(self, per_day: Counter[str], old: str | None, new: str) -> tuple[int, int]:
        """(characters, wordpieces) the text gains when a piece leaves day ``old`` (None: a new piece)
        for day ``new``: a day's first piece brings its date line."""
        gained = self._cost([new]) if per_day[new] <= 0 else (0, 0)
        lost = self._cost([old]) if old is not None and per_day[old] <= 1 else (0, 0)
        return gained[0] - lost[0], gained[1] - lost[1]

    def _rank(
        self, request: Request, found: list[Candidate], policy: PackingPolicy
    ) -> tuple[list[tuple[_Piece, int]], list[float]]:
        """Every message of the best episodes, best first (those a filter lets pass), and their scores."""
        ranked: list[tuple[float, _Piece, int]] = []
        limit = policy.excerpt_tokens * 4 if policy.excerpt_tokens is not None else None
        texts = MessageLines(request.analysis.match_text, limit)
        wanted = request.query.filter
        match = filter_match(request.group, wanted) if wanted is not None else None
        for scored in score_messages(request, found, policy, self._embedder):
            piece = _Piece(scored.episode, scored.messages, set(), texts)
            ranked += [
                (score, piece, i)
                for i, score in enumerate(scored.scores)
                if math.isfinite(score) and (match is None or match.message(scored.messages[i], scored.episode))
            ]
        by_score = sorted(ranked, key=lambda item: (-item[0], item[1].episode.uuid, item[2]))
        return [(piece, i) for _s, piece, i in by_score], [score for score, _piece, _i in by_score]


class _Packer:
    """The greedy fill: messages added one at a time while the text stays within a limit, with exact
    running sums of its characters and wordpieces (date lines and gap lines included)."""

    def __init__(self, builder: ContextBuilder) -> None:
        self._builder = builder
        self._costs = _LineCosts(builder._line_wordpieces)
        self.chars, self.wordpieces = len(HEADER), builder._line_wordpieces(HEADER)
        self.chosen: dict[str, _Piece] = {}
        self._piece_cost: dict[str, tuple[int, int]] = {}
        self._day_of: dict[str, str] = {}  # piece -> its date line
        self._per_day: Counter[str] = Counter()  # date line -> pieces under it

    @property
    def tokens(self) -> int:
        return self._builder._tokens(self.chars, self.wordpieces)

    def add(self, piece: _Piece, index: int, limit: int) -> bool:
        """Add message ``index`` of ``piece`` if the text stays within ``limit`` tokens (True: added)."""
        uuid = piece.episode.uuid
        current = self.chosen.get(uuid)
        if current is not None and index in current.chosen:
            return False
        trial = _Piece(piece.episode, piece.messages, (current.chosen if current else set()) | {index}, piece.texts)
        line_chars = self._costs.chars(trial)
        before = self._piece_cost.get(uuid, (0, 0))
        opened = self._builder._marker_cost(len(self.chosen) + 1) if current is None else (0, 0)  # [1]..[N + 1]
        day = day_header(trial.first.timestamp)
        moves = day != self._day_of.get(uuid)
        # The piece opens (or moves to) a day: a date line comes or goes.
        extra = self._builder._day_change(self._per_day, self._day_of.get(uuid), day) if moves else (0, 0)
        chars = self.chars + line_chars - before[0] + opened[0] + extra[0]
        if math.ceil(chars / 4) > limit:  # over on characters alone: no need to count its wordpieces
            return False
        line_wordpieces = self._costs.wordpieces(trial)
        wordpieces = self.wordpieces + line_wordpieces - before[1] + opened[1] + extra[1]
        if self._builder._tokens(chars, wordpieces) > limit:
            return False
        if moves:
            if uuid in self._day_of:
                self._per_day[self._day_of[uuid]] -= 1
            self._per_day[day] += 1
            self._day_of[uuid] = day
        self.chosen[uuid] = trial
        self._piece_cost[uuid] = (line_chars, line_wordpieces)
        self.chars, self.wordpieces = chars, wordpieces
        return True
