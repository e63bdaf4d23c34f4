"""The messages of a set of episodes as arrays, one row per message: what message scoring reads.

Rows of one episode are consecutive and in event-time order (the order of ``GroupReader.messages``).
Vectors are not copied: each row and each episode points into a matrix of unit vectors
(``GroupReader.vector_rows``: the group's own for a group held whole, or the vectors read for a few
episodes). ``group_rows`` are every episode's, kept with the group's version; ``episode_rows`` a few
episodes', made per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from memory.models import Episode, Message
from memory.readmodel.reader import KIND_CODE, Derivation, GroupReader
from memory.store.records import EPISODE_KINDS, RecordKind, message_record_id
from memory.timeutil import to_epoch


@dataclass(eq=False)
class MessageRows:
    episodes: list[Episode]
    messages: list[Message]  # one per row
    record_ids: list[str]  # message record id of each row
    owner: np.ndarray  # int64: the episode (index into ``episodes``) of each row
    matrix: np.ndarray  # float32 unit vectors the two index arrays point into
    message_vectors: np.ndarray  # int64 row -> matrix row (-1: no vector)
    episode_vectors: np.ndarray  # int64 episode -> matrix row (-1: no vector)
    message_keywords: np.ndarray  # int64 row -> keyword index position (-1: not indexed)
    episode_keywords: np.ndarray  # int64 episode -> keyword index position (-1: not indexed)
    centroid_norms: np.ndarray  # float64 per episode: norm of the sum of its messages' unit vectors (0: none)
    previous: np.ndarray  # int64 row -> the row before it in its episode (-1: first)
    following: np.ndarray  # int64 row -> the row after it in its episode (-1: last)
    speakers: np.ndarray  # object: casefolded speaker of each row
    sessions: np.ndarray  # object: session id of each row
    times: np.ndarray  # float64 epoch seconds of each row
    asks: np.ndarray  # bool: the message ends with a question mark

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def nbytes(self) -> int:
        arrays = (self.owner, self.message_vectors, self.message_keywords, self.previous, self.following, self.times)
        return sum(a.nbytes for a in arrays) + 3 * 8 * len(self) + 120 * len(self)


def message_rows(
    episodes: list[Episode],
    messages: Mapping[str, list[Message]],
    matrix: np.ndarray,
    vector_rows: Mapping[str, int],
    keyword_positions: Mapping[str, int],
) -> MessageRows:
    """Rows for ``episodes`` (each with its messages in event-time order, as ``messages`` holds
    them); ``vector_rows`` and ``keyword_positions`` map record ids to rows of ``matrix`` and to
    positions of the group's keyword index."""
    kept = [e for e in episodes if messages.get(e.uuid)]
    rows: list[Message] = []
    record_ids: list[str] = []
    owner: list[int] = []
    for number, episode in enumerate(kept):
        for message in messages[episode.uuid]:
            rows.append(message)
            record_ids.append(message_record_id(episode.session_id, message.id))
            owner.append(number)
    owners = np.asarray(owner, dtype=np.int64)
    message_vectors = np.asarray([vector_rows.get(r, -1) for r in record_ids], dtype=np.int64)
    same = np.zeros(len(rows), dtype=bool)
    if len(rows) > 1:
        same[1:] = owners[1:] == owners[:-1]
    previous = np.where(same, np.arange(len(rows)) - 1, -1)
    following = np.full(len(rows), -1, dtype=np.int64)
    if len(rows) > 1:
        following[:-1] = np.where(same[1:], np.arange(1, len(rows)), -1)
    return MessageRows(
        episodes=kept,
        messages=rows,
        record_ids=record_ids,
        owner=owners,
        matrix=matrix,
        message_vectors=message_vectors,
        episode_vectors=np.asarray([vector_rows.get(e.uuid, -1) for e in kept], dtype=np.int64),
        message_keywords=np.asarray([keyword_positions.get(r, -1) for r in record_ids], dtype=np.int64),
        episode_keywords=np.asarray([keyword_positions.get(e.uuid, -1) for e in kept], dtype=np.int64),
        centroid_norms=_centroid_norms(owners, message_vectors, matrix, len(kept)),
        previous=previous,
        following=following,
        speakers=np.asarray([m.speaker.casefold() for m in rows], dtype=object),
        sessions=np.asarray([e.session_id for e in kept], dtype=object)[owners] if rows else np.zeros(0, object),
        times=np.asarray([to_epoch(m.timestamp) for m in rows], dtype=np.float64),
        asks=np.asarray([m.content.rstrip().endswith("?") for m in rows], dtype=bool),
    )


def episode_rows(group: GroupReader, episode_ids: list[str]) -> MessageRows:
    """The messages of those episodes (not summaries) as scoring rows, with their vectors."""
    found = group.episodes(episode_ids)
    episodes = [
        e
        for e in (found[i] for i in episode_ids if i in found)
        if e.episode_type.value in EPISODE_KINDS and not e.source_episode_ids
    ]
    messages = group.messages(episodes)
    record_ids = [message_record_id(e.session_id, m.id) for e in episodes for m in messages.get(e.uuid, [])]
    matrix, vector_rows = group.vector_rows([e.uuid for e in episodes], record_ids)
    return message_rows(episodes, messages, matrix, vector_rows, group.columns.positions)


class GroupRows(Derivation[MessageRows]):
    """Every episode's messages (open episodes' included) as scoring rows."""

    key = "message-rows"

    def build(self, group: GroupReader) -> MessageRows:
        columns = group.columns
        ids = [columns.ids[p] for p in np.flatnonzero(columns.kinds == KIND_CODE[RecordKind.EPISODE.value])]
        return episode_rows(group, ids + sorted(group.open_episodes()))

    def size(self, value: MessageRows) -> int:
        return value.nbytes


GROUP_ROWS = GroupRows()


def group_rows(group: GroupReader) -> MessageRows | None:
    """Every episode's messages as scoring rows, kept with the group's version; None unless the group is held
    whole in memory (scoring every message of a group read from the store would read all of it)."""
    return group.derived(GROUP_ROWS) if group.whole else None


BLOCK_ROWS = 8192  # rows summed at a time (float64 copies of their vectors)


def _centroid_norms(owners: np.ndarray, message_vectors: np.ndarray, matrix: np.ndarray, episodes: int) -> np.ndarray:
    """Per episode, the norm of the sum of its messages' unit vectors (rows without one add nothing).
    Rows of an episode are consecutive: each block of episodes is one ``reduceat``, which adds a
    segment's rows in order in float64, as ``np.add.at`` did, at a fraction of its cost."""
    norms = np.zeros(episodes, dtype=np.float64)
    dimension = matrix.shape[1] if matrix.ndim == 2 else 0
    if not len(owners) or not dimension:
        return norms
    starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
    bounds = np.r_[starts, len(owners)].tolist()
    first = 0
    while first < len(starts):
        last = first + 1
        while last < len(starts) and bounds[last + 1] - bounds[first] <= BLOCK_ROWS:
            last += 1
        low, high = bounds[first], bounds[last]
        block = np.zeros((high - low, dimension), dtype=np.float64)
        rows = message_vectors[low:high]
        present = rows >= 0
        block[present] = matrix[rows[present]]
        sums = np.add.reduceat(block, starts[first:last] - low, axis=0)
        norms[owners[starts[first:last]]] = np.linalg.norm(sums, axis=1)
        first = last
    return norms
