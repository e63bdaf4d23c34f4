"""Topic-shift scores for the gaps between consecutive messages, offline.

Each gap (between message ``i - 1`` and message ``i``) gets a probability that a new topic starts
at message ``i``, from a small logistic model over a handful of features:

- embedding distance (the bundled MiniLM vectors the ingest computes anyway): of the two messages,
  of 2- and 3-message windows on each side, of the message two back (the same speaker in a
  two-person exchange), and the TextTiling depth of the 2-window similarity curve;
- lexical cues: how many of the message's content words were already said in the two messages
  before it; whether it opens with a shift cue ("anyway", "what do you do", ...) or an
  acknowledgement ("yeah", "lol", ...); its length;
- question/answer structure: the message before asked a question and the speaker changed (an
  answer is expected: a strong sign the topic continues); the message itself asks a question.

The weights are fitted on TIAGE's human topic-shift labels (``anno_train.json`` only) by
``tests/benchmarks/fit_boundaries.py`` and shipped in :mod:`memory.episodes.boundary_weights`. TIAGE has
neither timestamps nor speaker ids (its turns alternate), so time between messages and a speaker
continuing are not fitted: they enter as fixed, documented terms (:data:`PAUSE_WEIGHT`,
:data:`SAME_SPEAKER_WEIGHT`). A time gap over the session's limit is a hard boundary anyway
(:mod:`memory.episodes.segmentation`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from memory.episodes import boundary_weights as weights

FEATURES: tuple[str, ...] = (
    "distance_1",
    "distance_2",
    "distance_3",
    "distance_skip",
    "depth_2",
    "distance_next",
    "relative_distance",
    "new_words",
    "shift_cue",
    "acknowledgement",
    "answer_expected",
    "asks",
    "log_words",
)

# Not fitted (TIAGE has no times and no speaker ids): added to the logit as fixed terms.
PAUSE_WEIGHT = 0.5  # per natural-log unit of (1 + minutes of silence / 5)
SAME_SPEAKER_WEIGHT = -0.5  # the same person goes on: a shift is less likely

_WORD = re.compile(r"[a-z0-9']+")
_STOP = frozenset(
    """a an the and or but so if then of to in on at for with from by about as is am are was were be been
    being do does did have has had i me my mine you your yours he him his she her it its we us our they them
    their this that these those what which who whom how when where why not no yes yeah oh lol too very just
    really well can could would should will shall may might must there here up out all any some much many
    more most also only than like get got go going one ok okay haha hi hello hey im i'm it's that's don't""".split()
)
_SHIFT_CUES = (
    "anyway",
    "by the way",
    "btw",
    "so what",
    "what do you",
    "do you",
    "have you",
    "what is your",
    "what's your",
    "what are you",
    "are you",
    "how about",
    "speaking of",
    "changing the subject",
    "on another note",
    "tell me about",
)
_ACKNOWLEDGEMENTS = (
    "yes",
    "yeah",
    "yep",
    "no",
    "nope",
    "lol",
    "haha",
    "wow",
    "cool",
    "nice",
    "oh",
    "that",
    "sure",
    "right",
    "me too",
    "i agree",
    "awesome",
    "great",
    "thanks",
    "ok",
    "okay",
    "really",
    "sounds",
)


@dataclass(frozen=True, kw_only=True)
class Turn:
    """What the scorer needs of a message."""

    text: str
    speaker: str | None = None
    timestamp: datetime | None = None


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in _STOP and len(w) > 2}


def _starts_with(text: str, cues: Sequence[str]) -> bool:
    head = " ".join(words(text)[:4])
    return any(head == cue or head.startswith(cue + " ") for cue in cues)


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1.0, norms)


def _window_distances(vectors: np.ndarray, window: int) -> np.ndarray:
    """1 - cosine of the mean vectors of ``window`` messages before and after each gap."""
    n = len(vectors)
    out = np.zeros(n - 1)
    for gap in range(1, n):
        before = vectors[max(0, gap - window) : gap].mean(axis=0)
        after = vectors[gap : gap + window].mean(axis=0)
        norm = float(np.linalg.norm(before) * np.linalg.norm(after))
        out[gap - 1] = 1.0 - (float(before @ after) / norm if norm else 1.0)
    return out


def depth_scores(similarity: np.ndarray) -> np.ndarray:
    """TextTiling depth: how far each gap's similarity lies below the nearest peaks on both sides."""
    depth = np.zeros(len(similarity))
    for i, value in enumerate(similarity):
        left = value
        for j in range(i - 1, -1, -1):
            if similarity[j] < left:
                break
            left = similarity[j]
        right = value
        for j in range(i + 1, len(similarity)):
            if similarity[j] < right:
                break
            right = similarity[j]
        depth[i] = (left - value) + (right - value)
    return depth


def _lexical_features(turns: Sequence[Turn], gap: int) -> list[float]:
    text = turns[gap].text
    seen = content_words(turns[gap - 1].text) | (content_words(turns[gap - 2].text) if gap >= 2 else set())
    mine = content_words(text)
    new_words = len(mine - seen) / len(mine) if mine else 0.0
    previous = turns[gap - 1]
    speaker_changed = previous.speaker is None or turns[gap].speaker is None or previous.speaker != turns[gap].speaker
    return [
        new_words,
        float(_starts_with(text, _SHIFT_CUES)),
        float(_starts_with(text, _ACKNOWLEDGEMENTS)),
        float("?" in previous.text and speaker_changed),
        float("?" in text),
        math.log1p(len(words(text))),
    ]


def gap_features(turns: Sequence[Turn], vectors: np.ndarray) -> np.ndarray:
    """One row of :data:`FEATURES` per gap (``len(turns) - 1`` rows)."""
    n = len(turns)
    if len(vectors) != n:
        raise ValueError("one vector per message is required")
    if n < 2:
        return np.zeros((0, len(FEATURES)))
    unit = _unit(np.asarray(vectors, dtype=np.float64))
    adjacent = 1.0 - np.einsum("ij,ij->i", unit[:-1], unit[1:])
    windows2 = _window_distances(unit, 2)
    windows3 = _window_distances(unit, 3)
    skip = np.array([1.0 - float(unit[g - 2] @ unit[g]) if g >= 2 else adjacent[g - 1] for g in range(1, n)])
    following = np.append(adjacent[1:], adjacent[-1])
    depth = depth_scores(1.0 - windows2)
    relative = adjacent - float(np.median(adjacent))
    rows = [
        [adjacent[g - 1], windows2[g - 1], windows3[g - 1], skip[g - 1], depth[g - 1], following[g - 1]]
        + [relative[g - 1]]
        + _lexical_features(turns, g)
        for g in range(1, n)
    ]
    return np.asarray(rows, dtype=np.float64)


def logits_from_features(features: np.ndarray) -> np.ndarray:
    """The fitted model's logit for each row of features."""
    mean, scale = np.asarray(weights.MEAN), np.asarray(weights.SCALE)
    return ((features - mean) / scale) @ np.asarray(weights.COEFFICIENTS) + weights.INTERCEPT


def _fixed_terms(turns: Sequence[Turn]) -> np.ndarray:
    terms = np.zeros(max(0, len(turns) - 1))
    for gap in range(1, len(turns)):
        previous, current = turns[gap - 1], turns[gap]
        if previous.timestamp is not None and current.timestamp is not None:
            minutes = max(0.0, (current.timestamp - previous.timestamp).total_seconds() / 60)
            terms[gap - 1] += PAUSE_WEIGHT * math.log1p(minutes / 5)
        if previous.speaker is not None and previous.speaker == current.speaker:
            terms[gap - 1] += SAME_SPEAKER_WEIGHT
    return terms


def gap_logits(turns: Sequence[Turn], vectors: np.ndarray) -> np.ndarray:
    """Log-odds that a new topic starts at each message after the first."""
    if len(turns) < 2:
        return np.zeros(0)
    return logits_from_features(gap_features(turns, vectors)) + _fixed_terms(turns)


def gap_scores(turns: Sequence[Turn], vectors: np.ndarray) -> np.ndarray:
    """Probability (0-1) that a new topic starts at each message after the first."""
    return 1.0 / (1.0 + np.exp(-gap_logits(turns, vectors)))
