"""The weights of recall: how messages are scored (``ScoringPolicy``), shared by search and context (whose
``PackingPolicy``, retrieval.context, adds how they are packed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, kw_only=True)
class ScoringPolicy:
    """Weights of the message score; the defaults are chosen by leave-one-conversation-out on
    LoCoMo dev and REALTALK dev (docs/benchmarks-recall.md)."""

    depth: int = 200  # records taken from each ranking (vector and BM25)
    max_episodes: int = 40  # episodes whose messages are returned
    select: Literal["group", "episodes"] = "group"  # score every message, or those of the best-ranked episodes
    keyword_weight: float = 0.3  # BM25 (divided by the query's best BM25 score) added to the cosine
    episode_share: float = 0.8  # weight of the episode's own signal in each of its messages' score
    neighbour_share: float = 0.2  # weight of the best adjacent message's own signal
    speaker_bonus: float = 0.6  # added to the messages of a speaker the query names (by id or other name)
    time_bonus: float = 0.5  # added to the messages from a time the query names
    question_penalty: float = 0.1  # taken from a turn that ends with a question mark
    episode_centroid: float = 0.5  # share of an episode's cosine taken from its messages' centroid
    search_evidence: float = 2.0  # search: weight of an episode's best message score beside its fused rank
    strip_names: bool = True  # the names of the speakers the query names are left out of the matched text
    other_names: bool = True  # the speaker bonus also for a speaker's other names (retrieval.names)
    speaker_cap: bool = False  # the bonus also for a message that outscores every message of the named speakers
    speaker_cap_margin: float = 0.0  # ... by more than this (with ``speaker_cap``)
