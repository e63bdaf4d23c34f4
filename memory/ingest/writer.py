"""Store writes off the embedding path: one background thread runs a formation's writes in the order
they were given, while the caller goes on embedding (Chroma's writes and the model's forward passes
both release the interpreter, so on two cores they overlap; measured in docs/benchmarks-speed.md).

The order is the write-ahead protocol's (plans, then vectors, then "done"): a write that fails stops
every write after it, and ``wait`` raises its error, so a later step never lands without the earlier
one.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

from memory.background import in_background, mark_background


class OrderedWriter:
    def __init__(self, name: str = "epimem-writer") -> None:
        # A background thread's writes are background writes too (memory.background).
        initializer = mark_background if in_background() else None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=initializer)
        self._futures: list[Future[Any]] = []
        self._failed: BaseException | None = None

    def submit(self, write: Callable[[], Any]) -> None:
        """Run ``write`` after every write submitted before it (skipped once one has failed), in the
        caller's context (its tracing span is the parent of the write's spans)."""

        def run() -> Any:
            if self._failed is not None:
                return None
            try:
                return write()
            except BaseException as error:
                self._failed = error
                raise

        self._futures.append(self._pool.submit(contextvars.copy_context().run, run))

    def wait(self) -> None:
        """Until every submitted write has run; raises the first failure."""
        futures, self._futures = self._futures, []
        for future in futures:
            future.exception()  # wait for all, then report the first error
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    def __enter__(self) -> OrderedWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if kind is None:
                self.wait()
            else:  # the caller failed: let what was submitted finish, report the caller's error
                for future in self._futures:
                    future.exception()
        finally:
            self._pool.shutdown(wait=True)
