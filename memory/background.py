"""Background threads give way to requests: a lower CPU priority, and no Chroma write started while a search runs.

Forming episodes, finishing a restart's unfinished sessions, keeping read snapshots current, retention sweeps and
webhook deliveries all run in threads of their own while requests are answered. On a small machine they compete
for the same cores: a search answered while a formation embeds a batch took several times as long. On Linux a
thread's nice value is its own (and the threads it starts inherit it, the model's worker threads included), so
each background thread raises its own by ``EPIMEM_BACKGROUND_NICE``: the scheduler then runs a request first and
the background work in the time left, which on a machine not answering requests is all of it. Elsewhere nice is
per process, and nothing is changed. The formation worker keeps its priority: under a steady stream of adds it
would fall ever further behind them (every pending message is recalled, but the backlog grows, and a restart
meets it); it gives way to searches only, as below.

Embedded Chroma holds the interpreter for the whole of a call: a write of a few hundred records holds every other
thread of the process for tens of milliseconds, and a search that needs the interpreter a few times waited behind
several of them in a row (200-300 ms instead of 30 while a restart formed the sessions left open). So a background
thread waits, before each Chroma write and each embedding batch, until no search is in flight (``searching``), for
at most ``MAX_YIELD_S``: a search then waits for one write at most, and under constant load the background work
still moves.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MAX_NICE = 19
_nice = 10  # the default of EPIMEM_BACKGROUND_NICE; the service sets it from its settings
MAX_YIELD_S = 0.25  # the longest a background write waits for the searches in flight to end


class _ThreadState(threading.local):
    background = False  # set in background threads (``lower_this_thread``, ``mark_background``)


_thread = _ThreadState()
_searches = 0
_quiet = threading.Condition()


def set_background_nice(value: int) -> None:
    """How much background threads raise their nice value (0: not at all); process-wide, like the scheduler."""
    global _nice
    _nice = max(0, min(MAX_NICE, value))


def lower_this_thread() -> None:
    """Raise the calling thread's nice value by the background nice (Linux; up to 19; raising is always
    allowed, lowering it again is not, so only threads that do nothing but background work call this)."""
    mark_background()
    if _nice == 0 or not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    current = os.getpriority(os.PRIO_PROCESS, thread)
    wanted = min(MAX_NICE, current + _nice)
    if wanted > current:
        os.setpriority(os.PRIO_PROCESS, thread, wanted)


def background_thread(
    target: Callable[..., Any], *, name: str, args: tuple[Any, ...] = (), lower: bool = True
) -> threading.Thread:
    """A daemon thread (not started) that lowers its own priority (unless not ``lower``: it only gives way to
    searches), then runs ``target(*args)``."""

    def run() -> None:
        if lower:
            lower_this_thread()
        else:
            mark_background()
        target(*args)

    return threading.Thread(target=run, name=name, daemon=True)


def in_background() -> bool:
    """Whether the calling thread is a background thread (``background_thread``, or a writer one of them started)."""
    return _thread.background


def mark_background() -> None:
    """The calling thread does background work for the thread that started it (an ``OrderedWriter``'s thread)."""
    _thread.background = True


@contextmanager
def searching() -> Iterator[None]:
    """A search (or a context) in flight: background writes wait for it to end."""
    global _searches
    with _quiet:
        _searches += 1
    try:
        yield
    finally:
        with _quiet:
            _searches -= 1
            if _searches == 0:
                _quiet.notify_all()


def yield_to_searches() -> None:
    """Before a Chroma write: in a background thread, wait until no search is in flight (``MAX_YIELD_S`` at most)."""
    if in_background():
        with _quiet:
            _quiet.wait_for(lambda: _searches == 0, timeout=MAX_YIELD_S)
