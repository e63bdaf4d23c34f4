"""The webhooks' records, in one server-wide collection (``epm-webhooks``) that every epimem server on a
Chroma server shares: subscriptions, the outbox (one record per subscription and event, removed once
delivered), the delivery attempts and the delivery leases (memory.webhooks).

The outbox holds events, which name ids and never content. A record is JSON in the document; the
metadata holds what the reads select on (kind, subscription). Leases rely on Chroma's ``add`` ignoring
an id that exists (the first writer of a lease epoch wins), as the formation leases do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from memory.store import codec
from memory.store.calls import StorePart, store_call
from memory.store.paging import PAGE
from memory.store.parts import RecordCollection

NAME = "epm-webhooks"
Row = tuple[str, str]  # a record's own id (subscription, event or attempt id) and its JSON


def _event_record(subscription_id: str, event_id: str) -> str:
    return f"ev-{subscription_id}-{event_id}"


class WebhookStore(StorePart):
    def _collection(self, *, create: bool = False) -> RecordCollection | None:
        return self._collections.open(NAME, metadata={"epimem": "webhooks"}, create=create)

    def _put(self, ids: Sequence[str], documents: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        collection = self._collection(create=True)
        assert collection is not None
        collection.upsert(
            ids=list(ids),
            documents=list(documents),
            metadatas=cast(Any, list(metadatas)),
            embeddings=codec.placeholders(len(ids)),
        )

    def _rows(self, where: dict[str, Any], *, strip: str = "") -> list[Row]:
        collection = self._collection()
        if collection is None:
            return []
        ids = sorted(collection.get(where=cast(Any, where), include=[])["ids"])
        rows: list[Row] = []
        for start in range(0, len(ids), PAGE):
            found = collection.get(ids=ids[start : start + PAGE], include=["documents"])
            texts = dict(zip(found["ids"], found["documents"] or [], strict=True))
            rows += [(i.removeprefix(strip), texts[i] or "") for i in ids[start : start + PAGE] if i in texts]
        return rows

    def _ids(self, where: dict[str, Any]) -> list[str]:
        collection = self._collection()
        return [] if collection is None else sorted(collection.get(where=cast(Any, where), include=[])["ids"])

    def _delete(self, ids: Sequence[str]) -> int:
        collection = self._collection()
        if collection is None or not ids:
            return 0
        return len(self._collections.remove(collection, ids))

    @staticmethod
    def _of(kind: str, subscription_id: str) -> dict[str, Any]:
        return {"$and": [{"kind": kind}, {"subscription": subscription_id}]}

    # -- subscriptions -----------------------------------------------------------------------------

    @store_call
    def put_subscription(self, subscription_id: str, document: str) -> None:
        self._put([f"sub-{subscription_id}"], [document], [{"kind": "subscription", "subscription": subscription_id}])

    @store_call
    def subscriptions(self) -> list[Row]:
        return self._rows({"kind": "subscription"}, strip="sub-")

    @store_call
    def delete_subscription(self, subscription_id: str) -> bool:
        """The subscription and everything of it: its waiting events, its attempts, its leases."""
        removed = self._delete([f"sub-{subscription_id}"])
        self._delete(self._ids({"subscription": subscription_id}))
        return removed > 0

    # -- the outbox --------------------------------------------------------------------------------

    @store_call
    def add_events(self, events: Sequence[tuple[str, str, str]]) -> None:
        """(subscription id, event id, event JSON) for each delivery to make, in one write."""
        if events:
            self._put(
                [_event_record(s, e) for s, e, _ in events],
                [document for _, _, document in events],
                [{"kind": "event", "subscription": s} for s, _, _ in events],
            )

    @store_call
    def pending(self, subscription_id: str, limit: int) -> list[Row]:
        """The oldest ``limit`` events waiting for the subscription, oldest first (event ids sort by time)."""
        collection = self._collection()
        if collection is None:
            return []
        prefix = _event_record(subscription_id, "")
        ids = sorted(collection.get(where=cast(Any, self._of("event", subscription_id)), include=[])["ids"])[:limit]
        found: Any = collection.get(ids=ids, include=["documents"]) if ids else {"ids": [], "documents": []}
        texts = dict(zip(found["ids"], found["documents"] or [], strict=True))
        return [(i.removeprefix(prefix), texts[i] or "") for i in ids if i in texts]

    @store_call
    def pending_count(self, subscription_id: str) -> int:
        return len(self._ids(self._of("event", subscription_id)))

    @store_call
    def remove_event(self, subscription_id: str, event_id: str) -> None:
        self._delete([_event_record(subscription_id, event_id)])

    # -- delivery attempts -------------------------------------------------------------------------

    @store_call
    def put_attempt(self, subscription_id: str, attempt_id: str, document: str, *, keep: int) -> None:
        """One attempt of the delivery log; only the newest ``keep`` of the subscription are kept."""
        self._put(
            [f"at-{subscription_id}-{attempt_id}"], [document], [{"kind": "attempt", "subscription": subscription_id}]
        )
        ids = self._ids(self._of("attempt", subscription_id))
        if len(ids) > keep:
            self._delete(ids[: len(ids) - keep])

    @store_call
    def attempts(self, subscription_id: str, limit: int) -> list[Row]:
        """The newest ``limit`` attempts, newest first."""
        return self._rows(self._of("attempt", subscription_id), strip=f"at-{subscription_id}-")[::-1][:limit]

    # -- delivery leases ---------------------------------------------------------------------------

    @store_call
    def leases(self, subscription_id: str) -> list[dict[str, Any]]:
        collection = self._collection()
        if collection is None:
            return []
        found = collection.get(where=cast(Any, self._of("lease", subscription_id)), include=["metadatas"])
        return [dict(metadata or {}) for metadata in found["metadatas"] or []]

    @store_call
    def put_lease(self, subscription_id: str, epoch: int, metadata: dict[str, Any], *, insert: bool = False) -> None:
        """``insert``: the first writer of this epoch wins (``add``); otherwise the holder's renewal."""
        collection = self._collection(create=True)
        assert collection is not None
        write = collection.add if insert else collection.upsert
        write(
            ids=[f"lease-{subscription_id}-{epoch:012d}"],
            embeddings=codec.placeholders(1),
            metadatas=[{**metadata, "kind": "lease", "subscription": subscription_id, "epoch": epoch}],
        )

    @store_call
    def delete_leases(self, subscription_id: str, epochs: Sequence[int]) -> None:
        self._delete([f"lease-{subscription_id}-{epoch:012d}" for epoch in epochs])
