"""Shared helpers of the lifecycle, deletion and export tests (not collected: no test_ prefix)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from chromadb.api import ClientAPI

from api.facade import Epimem

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
REFERENCE = datetime(2023, 6, 1, tzinfo=UTC)

TOPICS = [
    "I went hiking at Lake Tahoe with my dog Rex and we saw a bald eagle.",
    "The pottery class was fun, I made a blue vase for my mother.",
    "My sister adopted a kitten named Luna from the animal shelter.",
    "We are planning a road trip to the Grand Canyon next summer.",
]


def chat(prefix: str, count: int, *, start: datetime, topic: int = 0, marker: str = "") -> list[dict]:
    """``count`` messages one minute apart; the first one carries ``marker`` when given."""
    speakers = ["Caroline", "Melanie"]
    messages = []
    for i in range(count):
        text = f"{TOPICS[(topic + i // 2) % len(TOPICS)]} ({prefix} {i})"
        if marker and i == 0:
            text = f"{text} The code word is {marker}."
        messages.append(
            {
                "id": f"{prefix}-{i}",
                "content": text,
                "producer_id": speakers[i % 2],
                "timestamp": (start + timedelta(minutes=i)).isoformat(),
            }
        )
    return messages


def two_episode_session(service: Epimem, group_id: str, session_id: str, *, day: int, marker: str = "") -> None:
    """Two episodes (a day apart: a time gap) of two messages each."""
    start = T0 + timedelta(days=day)
    first = chat(f"{session_id}-a", 2, start=start, topic=day, marker=marker)
    second = chat(f"{session_id}-b", 2, start=start + timedelta(days=1), topic=day + 1)
    service.add_messages(group_id, session_id, first + second)
    service.flush(group_id, session_id)


def scan_client(
    client: ClientAPI, needles: list[str], *, local: list[str] = (), group_id: str = ""
) -> list[tuple[str, str, str]]:
    """Every (collection, record id, needle) where a needle appears in any collection of the client:
    in its name or metadata, or in a record's id, document or metadata.

    ``needles`` are unique to the test and looked for everywhere; ``local`` ones (ids such as
    "s1-a-0" that other tests' groups on a shared server hold too) in every collection except
    those that belong to another group."""
    found: list[tuple[str, str, str]] = []
    for listed in client.list_collections():
        collection = client.get_collection(listed.name, embedding_function=None)
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


def cached_keyword_text(service: Epimem) -> str:
    """Everything held by the searcher's BM25 cache, as one text."""
    parts = []
    for _version, index in service.searcher.keywords.entries.values():
        parts += [f"{r.id} {r.document} {json.dumps(r.metadata, ensure_ascii=False)}" for r in index.records]
    return "\n".join(parts)
