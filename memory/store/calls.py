"""Every public store method is one *store call*: it runs inside the connection's gate (so an engine
restart waits for it), in a span, with transport failures mapped to ``StoreUnavailableError`` (503,
retryable). Store calls never nest: a public method calls only private helpers, so the gate needs
no re-entrancy (a nested call is a bug and raises at once).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import chromadb
import httpx

from memory.errors import StoreUnavailableError
from memory.store.collections import Collections
from memory.store.connection import ChromaConnection
from memory.store.deployment import AUTH_ERRORS
from memory.tracing import span

P = ParamSpec("P")
R = TypeVar("R")
_INTERNAL_RETRIES = 3
_inside = threading.local()


class StorePart:
    """A part of the store (log, vectors, admin) over the shared collection opener."""

    def __init__(self, collections: Collections) -> None:
        self._collections = collections

    @property
    def connection(self) -> ChromaConnection:
        return self._collections.connection

    @property
    def model_id(self) -> str:
        return self._collections.model_id


Part = TypeVar("Part", bound=StorePart)


def store_call(function: Callable[Concatenate[Part, P], R]) -> Callable[Concatenate[Part, P], R]:
    """Chroma's embedded engine occasionally fails a read under concurrent writes with an
    ``InternalError`` ("Error creating hnsw segment reader: Nothing found on disk"); the same call
    succeeds moments later. Such calls are retried a few times (every store write is an idempotent
    upsert/insert), then reported as 503 rather than as a server error. A collection that is gone
    under a cached handle (another server dropped it) is retried once with fresh handles."""

    @functools.wraps(function)
    def wrapper(part: Part, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if getattr(_inside, "call", None):
            raise AssertionError(f"store call {function.__qualname__} inside {_inside.call}: calls never nest")
        for attempt in range(_INTERNAL_RETRIES + 1):
            _inside.call = function.__qualname__
            try:
                with span(f"epimem.store.{function.__name__}"), part.connection.call():
                    return function(part, *args, **kwargs)
            except (httpx.TransportError, ConnectionError, TimeoutError) as error:
                raise StoreUnavailableError(f"the vector store is unavailable: {error}") from error
            except AUTH_ERRORS as error:  # the token was revoked or changed since the start
                raise StoreUnavailableError(f"the vector store refused epimem's token: {error}") from error
            except chromadb.errors.NotFoundError:
                # A cached handle of a collection that another server dropped (or dropped and made
                # again): forget the handles and try once more with fresh ones.
                if attempt:
                    raise
                part.connection.forget()
            except chromadb.errors.InternalError as error:
                if attempt == _INTERNAL_RETRIES:
                    raise StoreUnavailableError(
                        f"the vector store failed internally: {error}", retry_after=1
                    ) from error
            finally:
                _inside.call = None
            time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    return wrapper
