"""glibc malloc settings of a process that runs embedded Chroma (``memory.store.connection``).

The engine (Rust, on its own threads) and the model (PyTorch) allocate through the C library's
malloc. Three things about it matter to an embedded store: what a fresh block holds (erasure), how
much freed memory is handed back, and how many arenas the threads spread their blocks over."""

from __future__ import annotations

import ctypes

_M_PERTURB = -6  # glibc mallopt parameters
_M_ARENA_MAX = -8
_FILL = 0xFF  # freed blocks are set to 0xFF, blocks malloc hands out to ~0xFF = 0x00
ARENAS = 2


def _glibc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None


def fill_fresh_memory() -> bool:
    """Make every block glibc's malloc hands out hold zeros, not what was freed there before.

    The engine saves each vector index from preallocated buffers (hnswlib ``malloc``s its capacity
    and writes all of it), and it saves them again while serving, on a collection's first read
    after a start. The unused part held whatever this process had freed there — measured: deleted
    messages, titles and group descriptions, written 10-40 ms after the delete answered. With
    ``M_PERTURB`` that part holds zeros (and freed blocks are overwritten at once). Costs one
    memset per allocation and free. False where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_PERTURB, _FILL))


def bound_arenas(arenas: int = ARENAS) -> bool:
    """Let the process's threads share ``arenas`` malloc arenas (glibc's default: up to 8 per
    core). Each engine restart frees an engine's indexes and starts new threads; with an arena per
    thread their freed pages stay spread over many arenas that ``malloc_trim`` cannot empty, and
    resident memory crept (measured, a fresh process touching 1,000 partitions: 1,009 MB after,
    1,053 peak; with 2 arenas 837 and 900, the touch as fast: docs/benchmarks-speed.md). Applies to
    arenas made from now on. False where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_ARENA_MAX, arenas))


def return_freed_memory() -> None:
    """glibc keeps freed heap pages for reuse; the engine's indexes are freed in many pieces, so
    without a trim resident memory barely drops (measured: 394 vs 220 MB after 300 partitions)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
