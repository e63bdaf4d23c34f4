"""Checks of what the store holds, read through the service's public parts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from chromadb.api import ClientAPI

from api.facade import Epimem
from memory.models import MessageState
from memory.readmodel.snapshot import GroupSnapshot
from memory.store.records import RecordFilter
from retrieval.keyword import KEYWORDS, KeywordIndex


def assert_consistent(
    service: Epimem, group_id: str, expected: Mapping[str, Mapping[str, str]], *, flushed: bool
) -> None:
    """The invariants of the write path, read straight from the store.

    ``expected``: session -> message id -> content. Every message is stored once with its content;
    no message is in two episodes; partition and group index hold the same episodes; every DONE
    message points at a stored episode that lists it; after a flush every message is in exactly one
    episode.
    """
    log, vectors = service.memory.store.log, service.memory.store.vectors
    index_episodes = [r for r in vectors.records(group_id) if r.kind == "episode"]
    sessions_with_vectors = {str(r.metadata["session_id"]) for r in index_episodes}
    assert sessions_with_vectors <= set(expected), "episodes of a deleted or unknown session remain"
    for session_id, messages in expected.items():
        stored = log.list_messages(group_id, session_id)
        ids = [s.message.id for s in stored]
        assert len(ids) == len(set(ids)), "a message is stored twice"
        assert {s.message.id: s.message.content for s in stored} == dict(messages), "lost or altered messages"
        partition = [
            r
            for r in vectors.records(group_id, selection=RecordFilter(session_ids=(session_id,)))
            if r.kind == "episode"
        ]
        in_index = sorted(r.id for r in index_episodes if r.metadata["session_id"] == session_id)
        assert sorted(r.id for r in partition) == in_index, "partition and group index disagree"
        sources: Counter[str] = Counter()
        members: dict[str, set[str]] = {}
        for record in partition:
            source_ids = json.loads(record.metadata["source_ids"])
            assert int(record.metadata["message_count"]) == len(source_ids)
            sources.update(source_ids)
            members[record.id] = set(source_ids)
        twice = [mid for mid, count in sources.items() if count > 1]
        assert not twice, f"messages in more than one episode: {twice[:5]}"
        assert set(sources) <= set(messages), "an episode cites a message that does not exist"
        for s in stored:
            if s.state is MessageState.DONE:
                assert s.episode_id in members and s.message.id in members[s.episode_id]
        if flushed:
            assert set(sources) == set(messages), f"messages in no episode: {sorted(set(messages) - set(sources))[:5]}"
            assert all(s.state is MessageState.DONE for s in stored)


def every_client(service: Epimem) -> list[ClientAPI]:
    """The clients of every engine of the service's store (an embedded folder keeps its partitions
    in an engine of their own)."""
    return [engine.client for engine in service.memory.store.connection.engines]


def scan_client(
    clients: ClientAPI | Sequence[ClientAPI], needles: list[str], *, local: Sequence[str] = (), group_id: str = ""
) -> list[tuple[str, str, str]]:
    """Every (collection, record id, needle) where a needle appears in any collection of the clients:
    in its name or metadata, or in a record's id, document or metadata.

    ``needles`` are unique to the test and looked for everywhere; ``local`` ones (ids such as
    "s1-a-0" that other tests' groups on a shared server hold too) in every collection except
    those that belong to another group."""
    found: list[tuple[str, str, str]] = []
    listed = [
        (client, name.name)
        for client in (clients if isinstance(clients, Sequence) else [clients])
        for name in client.list_collections()
    ]
    for client, name in listed:
        collection = client.get_collection(name, embedding_function=None)
        owner = (collection.metadata or {}).get("group_id")
        mine = owner is None or owner == group_id
        needles_here = list(needles) + (list(local) if mine else [])
        header = f"{collection.name} {json.dumps(collection.metadata or {}, ensure_ascii=False)}"
        found += [(collection.name, "", needle) for needle in needles_here if needle in header]
        offset = 0
        while True:
            page = collection.get(include=["documents", "metadatas"], limit=1000, offset=offset)
            for record_id, document, metadata in zip(
                page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True
            ):
                blob = f"{record_id} {document or ''} {json.dumps(metadata or {}, ensure_ascii=False)}"
                found += [(collection.name, record_id, needle) for needle in needles_here if needle in blob]
            if len(page["ids"]) < 1000:
                break
            offset += 1000
    return found


def kept_keyword_indexes(service: Epimem) -> dict[str, KeywordIndex]:
    """The keyword index the read model keeps with each group's snapshot (those built)."""
    found = {}
    for group_id in service.read_model.groups():
        snapshot = service.read_model.cached(group_id)
        index = dict(snapshot.derived_items()).get(KEYWORDS.key) if snapshot is not None else None
        if index is not None:
            found[group_id] = index
    return found


def cached_keyword_text(service: Epimem) -> str:
    """Everything held by the read model's BM25 indexes, as one text."""
    parts = []
    for index in kept_keyword_indexes(service).values():
        parts += [f"{r.id} {r.document} {json.dumps(r.metadata, ensure_ascii=False)}" for r in index.records]
    return "\n".join(parts)


# -- read snapshots ----------------------------------------------------------------------------------------


class Direction:
    """A snapshot's unit vector, equal to another within float32 rounding. A snapshot patched from a write
    holds the vector as it was written; one read from Chroma holds what a cosine collection returns, the unit
    vector times its norm, one float32 rounding away (memory.store.dump): rounding both to a few decimals
    would still tell them apart whenever a component sits on a rounding boundary."""

    def __init__(self, row: np.ndarray | None) -> None:
        self.row = row

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Direction):
            return NotImplemented
        if self.row is None or other.row is None:
            return self.row is None and other.row is None
        return self.row.shape == other.row.shape and bool(np.allclose(self.row, other.row, rtol=0, atol=1e-6))

    def __repr__(self) -> str:
        return "Direction(None)" if self.row is None else f"Direction({self.row[:4]}...)"


def by_record(snapshot: GroupSnapshot) -> dict[str, tuple[Any, ...]]:
    """Everything a snapshot says of each record, keyed by id (the stored order may differ): past the full bound,
    an episode's metadata too."""
    found = {}
    held = snapshot.episode_metadatas or {}
    for position, record_id in enumerate(snapshot.ids):
        record = snapshot.record(position)
        direction = Direction(snapshot.directions[position] if snapshot.directions is not None else None)
        episode = tuple(sorted(held[record_id].items())) if record_id in held else None
        found[record_id] = (record.document, tuple(sorted(record.metadata.items())), direction, episode)
    return found


def keyword_scores(index: KeywordIndex, snapshot: GroupSnapshot, query: str) -> dict[str, float]:
    scores = index.scores(query)
    return {record_id: float(scores[position]) for position, record_id in enumerate(snapshot.ids)}


def answers(service: Epimem, group_id: str, queries: Sequence[str]) -> list[Any]:
    """What a client sees for each query: the context (text, citations) and the search hits (ids, scores)."""
    found: list[Any] = []
    for query in queries:
        context = service.context(group_id, query, token_budget=300)
        hits = service.search(group_id, query, k=5)
        found.append((context.text, context.citations, [(h.episode.uuid, round(h.score, 9)) for h in hits]))
    return found


def formed(page: Any) -> list[Any]:
    """The episodes of a timeline page that are formed: not a session's open episode (its pending messages)."""
    return [episode for episode in page.episodes if episode.uuid not in page.pending]
