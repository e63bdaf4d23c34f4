"""One process per embedded data folder.

Embedded Chroma keeps its indexes and write log in the memory of the process that opened the
folder; a second process writing the same folder corrupts what the first one holds. So the first
process to open a folder takes an exclusive ``flock`` on ``<folder>/epimem.lock`` and writes its pid
(and command line) into it; a second process fails at once with ``FolderLockedError`` naming the
holder. The operating system drops the lock when the holder exits, even on ``kill -9``, so a stale
file never blocks anyone. Inside one process the lock is shared: every opener of the folder counts,
and the last ``release`` lets it go.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from pathlib import Path
from typing import IO

from memory.errors import EpimemError

LOCK_NAME = "epimem.lock"


class FolderLockedError(EpimemError):
    """Another process holds the embedded data folder."""

    code = "data_folder_locked"
    status_code = 409


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return "another process"
    return text or "another process"


class FolderLock:
    """The process's exclusive lock on one data folder (reference-counted inside the process)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LOCK_NAME
        self._file: IO[str] | None = None
        self._users = 0

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        if self._file is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("a+", encoding="utf-8")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise FolderLockedError(
                    f"the data folder {self.folder} is in use by {_holder(self.path)}. Embedded Chroma is one process "
                    "per folder: stop that process first, or share the data through a Chroma server "
                    "(`chroma run --path DIR`, then EPIMEM_CHROMA_HOST / EPIMEM_CHROMA_PORT)",
                    details={"lock_file": str(self.path)},
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} ({' '.join(sys.argv)[:200]})\n")
            handle.flush()
            self._file = handle
        self._users += 1

    def release(self) -> None:
        if self._file is None:
            return
        self._users -= 1
        if self._users > 0:
            return
        self._users = 0
        handle, self._file = self._file, None
        handle.seek(0)
        handle.truncate()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


_LOCKS: dict[str, FolderLock] = {}
_LOCKS_GUARD = threading.Lock()


def lock_folder(folder: Path) -> FolderLock:
    """Take (or share, inside this process) the lock of ``folder``; raises ``FolderLockedError`` when
    another process holds it. Pair each call with ``release_folder``."""
    key = str(Path(folder).resolve())
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(key, FolderLock(Path(key)))
        lock.acquire()
        return lock


def release_folder(folder: Path) -> None:
    key = str(Path(folder).resolve())
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is not None:
            lock.release()
