"""Background threads give way to requests (memory.background): on Linux they run at a higher nice value (and so do
the threads they start), and before a Chroma write or an embedding batch they wait while a search is in flight, for
a bounded time; a request's own thread never waits."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from memory import background
from memory.background import background_thread, in_background, searching, yield_to_searches
from memory.ingest.writer import OrderedWriter


def niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_a_background_thread_and_the_threads_it_starts_run_at_a_lower_priority() -> None:
    seen: dict[str, object] = {}

    def work() -> None:
        seen["nice"], seen["background"] = niceness(), in_background()
        with OrderedWriter() as writer:  # a formation's writer thread, started by the background thread
            writer.submit(lambda: seen.update(writer_nice=niceness(), writer_background=in_background()))

    thread = background_thread(work, name="epimem-test-background")
    thread.start()
    thread.join(timeout=30)
    expected = min(19, niceness() + 10)
    assert seen == {"nice": expected, "background": True, "writer_nice": expected, "writer_background": True}
    assert not in_background() and niceness() < expected  # the caller's own thread is untouched

    formation = background_thread(lambda: seen.update(kept=niceness(), marked=in_background()), name="f", lower=False)
    formation.start()
    formation.join(timeout=30)
    assert (seen["kept"], seen["marked"]) == (niceness(), True)  # gives way to searches, keeps its priority


def test_a_background_write_waits_for_the_searches_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "MAX_YIELD_S", 60.0)  # here the wait ends with the search, not the bound
    wrote = threading.Event()

    def write() -> None:
        yield_to_searches()
        wrote.set()

    with searching():
        yield_to_searches()  # a request's own thread goes on at once
        thread = background_thread(write, name="epimem-test-write")
        thread.start()
        assert not wrote.wait(0.3)  # (can only pass wrongly on a slow machine, never fail wrongly)
    assert wrote.wait(30)
    thread.join(timeout=30)


def test_under_constant_searches_a_background_write_still_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "MAX_YIELD_S", 0.05)
    wrote = threading.Event()
    thread = background_thread(lambda: (yield_to_searches(), wrote.set()), name="epimem-test-bounded")
    with searching():
        thread.start()
        assert wrote.wait(30)  # the search never ended: the wait was bounded
    thread.join(timeout=30)
