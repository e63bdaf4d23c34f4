"""A process that opens an embedded store sets glibc's malloc the way memory.engine.allocator says:
fresh blocks hold zeros, not what was freed there (erasure), and its threads share a bounded number
of arenas (resident memory). Each case runs in a fresh interpreter: the settings last for the process."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memory.engine.allocator import ARENAS

pytestmark = [
    pytest.mark.skipif(
        platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings"
    ),
    pytest.mark.slow,  # over about a second on a quiet core: in the whole command, not the quick loop
]

PROBE = textwrap.dedent(
    """
    import ctypes, os, re, sys, tempfile, threading
    from pathlib import Path

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.fdopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fflush.argtypes = [ctypes.c_void_p]

    def arenas():
        with tempfile.TemporaryFile() as out:
            stream = libc.fdopen(os.dup(out.fileno()), b"w")
            libc.malloc_info(0, stream)
            libc.fflush(stream)
            out.seek(0)
            return len(re.findall(rb"<heap nr=", out.read()))

    from memory.store import connection  # its imports (chromadb) may start threads of their own

    print("arenas-before", arenas())
    if sys.argv[1] == "open":
        connection.open_connection(data_dir=Path(sys.argv[2]), host=None, port=0)

    # a block freed and handed out again: what does it hold?
    size = 4096
    block = libc.malloc(size)
    ctypes.memset(block, 0x41, size)
    libc.free(block)
    again = libc.malloc(size)
    held = ctypes.string_at(again, size)[64:]
    print("recycled-secret", held.count(b"A"))

    # eight threads allocating at once: how many arenas do they spread over?
    barrier = threading.Barrier(8)
    def work():
        barrier.wait()
        blocks = [libc.malloc(1000) for _ in range(200)]
        for b in blocks:
            libc.free(b)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("arenas", arenas())
    """
)


def probe(how: str, folder: Path) -> dict[str, int]:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, how, str(folder)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return {key: int(value) for key, value in (line.split() for line in done.stdout.splitlines())}


def test_an_embedded_store_process_zeroes_fresh_blocks_and_bounds_its_arenas(tmp_path: Path) -> None:
    plain = probe("plain", tmp_path / "plain")
    opened = probe("open", tmp_path / "opened")
    # the probe itself can tell: without the settings, the freed secret comes back and threads spread
    assert plain["recycled-secret"] > 0
    assert plain["arenas"] > max(ARENAS, plain["arenas-before"])
    assert opened["recycled-secret"] == 0
    assert opened["arenas"] <= max(ARENAS, opened["arenas-before"])  # the bound holds for arenas made after
