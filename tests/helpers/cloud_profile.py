"""The cloud profile: every Chroma call that epimem's code makes, checked against Chroma Cloud's published quotas
("Quotas & Limits", docs.trychroma.com/cloud/quotas-limits), on any backend. A call over a limit raises
``QuotaExceeded`` where it is made (and is kept, so that a call whose error something swallowed still fails
the run); calls made by the tests themselves (raw reads of what the store holds) are counted, not checked.

It wraps the real chromadb classes (the collection's add, upsert, update, get, query, delete, count and
modify; the client's collection calls), so it sees exactly what reaches Chroma. The limits are written here
from the published table, not taken from ``memory.store.quotas``: the check does not trust the code it checks.

``tests/conftest.py`` installs it for the whole test suite (``EPIMEM_CLOUD_PROFILE=0`` leaves it out);
``python tests/helpers/cloud_profile.py SCRIPT ARGS`` runs a script (a benchmark) under it and prints the tally.
"""

from __future__ import annotations

import functools
import json
import runpy
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import chromadb.api.client
import chromadb.api.models.Collection

RECORDS_PER_WRITE = 300
RESULTS = 300
DOCUMENT_BYTES = 16_384
VALUE_BYTES = 4_096
KEYS = 32
KEY_BYTES = 36
ID_BYTES = 128
COLLECTION_NAME_BYTES = 128
COLLECTION_VALUE_BYTES = 256
WHERE_PREDICATES = 8
CONCURRENT = 10  # reads, and writes, in flight per collection
DIMENSIONS = 4_096
EPIMEM_PACKAGES = ("memory.", "retrieval.", "api.")
READS = ("get", "query", "count")
WRITES = ("add", "upsert", "update", "delete", "modify")


class QuotaExceeded(AssertionError):
    """A Chroma call of epimem over one of Chroma Cloud's quotas."""


@dataclass
class Tally:
    checked: Counter[str] = field(default_factory=Counter)
    unchecked: Counter[str] = field(default_factory=Counter)  # the tests' own calls
    exceeded: list[str] = field(default_factory=list)
    most_in_flight: dict[str, int] = field(default_factory=lambda: {"read": 0, "write": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: Counter[tuple[str, str]] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "checked": sum(self.checked.values()),
            "by_call": dict(sorted(self.checked.items())),
            "unchecked": sum(self.unchecked.values()),
            "exceeded": list(self.exceeded),
            "most_in_flight_per_collection": dict(self.most_in_flight),
        }


TALLY = Tally()
_installed = False


def _bytes(text: Any) -> int:
    return len(str(text).encode("utf-8", "surrogatepass"))


def predicates(where: Any) -> int:
    """Leaf predicates of a ``where`` clause."""
    if not isinstance(where, Mapping):
        return 0
    count = 0
    for key, value in where.items():
        if key in ("$and", "$or"):
            count += sum(predicates(item) for item in value)
        else:
            count += 1
    return count


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str | Mapping):
        return [value]
    return list(value)


def problems(method: str, arguments: Mapping[str, Any]) -> list[str]:
    """What in one call's arguments is over a limit."""
    found: list[str] = []
    ids = _listed(arguments.get("ids"))
    if method in ("add", "upsert", "update", "delete") and len(ids) > RECORDS_PER_WRITE:
        found.append(f"{len(ids)} records in one {method} (at most {RECORDS_PER_WRITE})")
    found += [f"id of {_bytes(i)} bytes (at most {ID_BYTES})" for i in ids if _bytes(i) > ID_BYTES][:3]
    if method == "get":
        limit = arguments.get("limit")
        if not ids and (limit is None or limit > RESULTS):
            found.append(f"a get of every match without a limit of at most {RESULTS} (limit {limit})")
        if len(ids) > RESULTS:
            found.append(f"a get of {len(ids)} ids (at most {RESULTS} results)")
    if method == "query" and int(arguments.get("n_results", 10)) > RESULTS:
        found.append(f"a query for {arguments['n_results']} results (at most {RESULTS})")
    if predicates(arguments.get("where")) > WHERE_PREDICATES:
        found.append(f"{predicates(arguments['where'])} where predicates (at most {WHERE_PREDICATES})")
    for document in _listed(arguments.get("documents")):
        if document is not None and _bytes(document) > DOCUMENT_BYTES:
            found.append(f"a document of {_bytes(document)} bytes (at most {DOCUMENT_BYTES})")
    for metadata in _listed(arguments.get("metadatas")):
        found += metadata_problems(metadata, VALUE_BYTES)
    embeddings = arguments.get("embeddings")
    if embeddings is not None and len(embeddings) and len(embeddings[0]) > DIMENSIONS:
        found.append(f"embeddings of {len(embeddings[0])} dimensions (at most {DIMENSIONS})")
    return found


def metadata_problems(metadata: Any, value_bytes: int) -> list[str]:
    if not metadata:
        return []
    found = []
    if len(metadata) > KEYS:
        found.append(f"{len(metadata)} metadata keys (at most {KEYS})")
    found += [
        f"metadata key {k!r} of {_bytes(k)} bytes (at most {KEY_BYTES})" for k in metadata if _bytes(k) > KEY_BYTES
    ]
    found += [
        f"metadata value of {k!r}: {_bytes(v)} bytes (at most {value_bytes})"
        for k, v in metadata.items()
        if isinstance(v, str) and _bytes(v) > value_bytes
    ]
    return found


def collection_problems(name: Any, metadata: Any) -> list[str]:
    found = (
        [f"collection name of {_bytes(name)} bytes"]
        if name is not None and _bytes(name) > COLLECTION_NAME_BYTES
        else []
    )
    return found + metadata_problems(metadata, COLLECTION_VALUE_BYTES)


def _ours(depth: int = 2) -> bool:
    """Whether the call was made by epimem's code (not by a test reading the store)."""
    caller = sys._getframe(depth).f_globals.get("__name__", "")
    return str(caller).startswith(EPIMEM_PACKAGES)


def _exceeded(what: str, found: Iterable[str]) -> None:
    found = list(found)
    if found:
        message = f"{what}: " + "; ".join(found)
        with TALLY.lock:
            TALLY.exceeded.append(message)
        raise QuotaExceeded(message)


def _checked_collection_method(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    kind = "read" if name in READS else "write"
    keywords = original.__code__.co_varnames[1 : original.__code__.co_argcount]

    @functools.wraps(original)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _ours():
            with TALLY.lock:
                TALLY.unchecked[name] += 1
            return original(self, *args, **kwargs)
        arguments = {**dict(zip(keywords, args, strict=False)), **kwargs}
        if name == "modify":
            _exceeded(f"{name} of {self.name}", collection_problems(arguments.get("name"), arguments.get("metadata")))
        else:
            _exceeded(f"{name} on {self.name}", problems(name, arguments))
        key = (str(self.id), kind)
        with TALLY.lock:
            TALLY.checked[name] += 1
            TALLY.in_flight[key] += 1
            now = TALLY.in_flight[key]
            TALLY.most_in_flight[kind] = max(TALLY.most_in_flight[kind], now)
        try:
            if now > CONCURRENT:
                _exceeded(
                    f"{name} on {self.name}", [f"{now} {kind}s in flight on one collection (at most {CONCURRENT})"]
                )
            result = original(self, *args, **kwargs)
        finally:
            with TALLY.lock:
                TALLY.in_flight[key] -= 1
        if name in ("get", "query"):
            ids = result["ids"]
            returned = len(ids) if name == "get" else max((len(found) for found in ids), default=0)
            if returned > RESULTS:
                _exceeded(f"{name} on {self.name}", [f"{returned} results (at most {RESULTS})"])
        return result

    return checked


def _checked_client_method(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    keywords = original.__code__.co_varnames[1 : original.__code__.co_argcount]

    @functools.wraps(original)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _ours():
            with TALLY.lock:
                TALLY.unchecked[name] += 1
            return original(self, *args, **kwargs)
        arguments = {**dict(zip(keywords, args, strict=False)), **kwargs}
        found = collection_problems(arguments.get("name"), arguments.get("metadata"))
        if name == "list_collections" and (arguments.get("limit") is None or arguments["limit"] > RESULTS):
            found.append(f"a listing of collections without a limit of at most {RESULTS}")
        _exceeded(f"client {name}", found)
        with TALLY.lock:
            TALLY.checked[name] += 1
        return original(self, *args, **kwargs)

    return checked


COLLECTION_METHODS = ("add", "upsert", "update", "get", "query", "delete", "count", "modify")
CLIENT_METHODS = (
    "create_collection",
    "get_or_create_collection",
    "get_collection",
    "delete_collection",
    "list_collections",
)


def install() -> Tally:
    """Check every Chroma call of epimem from now on, in this process (once)."""
    global _installed
    if not _installed:
        collection = chromadb.api.models.Collection.Collection
        for name in COLLECTION_METHODS:
            setattr(collection, name, _checked_collection_method(name, getattr(collection, name)))
        client = chromadb.api.client.Client
        for name in CLIENT_METHODS:
            setattr(client, name, _checked_client_method(name, getattr(client, name)))
        _installed = True
    return TALLY


def main() -> None:
    """``cloud_profile.py SCRIPT ARGS``: the script run under the profile; the tally printed on stderr."""
    install()
    script, sys.argv = sys.argv[1], sys.argv[1:]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.stderr.write("cloud profile: " + json.dumps(TALLY.summary()) + "\n")


if __name__ == "__main__":
    main()
