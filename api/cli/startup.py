"""What ``epimem serve`` checks before it loads anything, and the server that says when it listens.

Every check fails with ``StartupError`` (one plain line for the terminal, exit status 2) before the
model loads or the store opens: the data folder (exists or can be created, is a folder, writable),
the port (bound here, then handed to uvicorn, so no other process can take it in between), the key
file, the folder lock of an embedded store, and a Chroma deployment (it answers, takes the token, and
has the tenant and database or lets them be created).
"""

from __future__ import annotations

import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from api.auth import KeyRing
from api.settings import Settings
from memory.engine.folder_lock import lock_folder
from memory.errors import EpimemError

if TYPE_CHECKING:  # uvicorn loads only for `serve`: the other commands start faster without it
    import uvicorn


class StartupError(Exception):
    """A reason not to start, said in one line."""


def check_data_dir(folder: Path) -> None:
    """The folder exists (or can be created), is a folder, and this user can write into it."""
    if folder.exists() and not folder.is_dir():
        raise StartupError(f"data folder {folder} is a file, not a folder: choose another --data-dir")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StartupError(f"cannot create the data folder {folder}: {error.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise StartupError(f"cannot write into the data folder {folder}: {error.strerror}") from None


def bind_port(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), ready to hand to uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == 98:  # EADDRINUSE
            raise StartupError(
                f"port {port} on {host} is already in use (another epimem serve?): stop it or choose --port"
            ) from None
        raise StartupError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def check_keys(settings: Settings) -> KeyRing:
    path = settings.api_keys_file
    if path is not None and not Path(path).is_file():
        raise StartupError(f"API key file {path} (EPIMEM_API_KEYS_FILE) does not exist or is not a file")
    try:
        return KeyRing.from_file(path, store=settings.api_keys_store)
    except EpimemError as error:
        raise StartupError(error.message) from None


def check_deployment(settings: Settings) -> None:
    """The Chroma deployment answers, takes the token, and has the tenant and database (or made them)."""
    from memory.store.deployment import connect  # chromadb: only for a start on a Chroma deployment

    deployment = settings.chroma_deployment()
    if deployment is None:
        return
    try:
        connect(deployment)
    except EpimemError as error:
        raise StartupError(error.message) from None


def check_before_loading(settings: Settings, *, host: str, port: int) -> tuple[KeyRing, socket.socket]:
    """Every check that needs no model; the embedded folder's lock is taken and kept for the process.
    Returns the keys and the bound socket. The port is bound before anything touches the data folder: a busy
    port stops the start with the folder as it was (not created, no ``epimem.lock`` written)."""
    keys = check_keys(settings)
    if settings.chroma_host is not None:
        check_deployment(settings)
    sock = bind_port(host, port)
    if settings.chroma_host is None:
        try:
            check_data_dir(settings.data_dir)
            lock_folder(settings.data_dir)
        except StartupError:
            sock.close()
            raise
        except EpimemError as error:
            sock.close()
            raise StartupError(error.message) from None
    return keys, sock


def serve_announcing(config: uvicorn.Config, sock: socket.socket, announce: Callable[[], None]) -> None:
    """Run a uvicorn server on ``sock`` that calls ``announce`` once it is actually listening (after
    the lifespan, i.e. after the model has loaded and the store has opened)."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                announce()

    AnnouncingServer(config).run(sockets=[sock])


def banner(host: str, port: int, where: str) -> Callable[[], None]:
    shown = f"[{host}]" if ":" in host else host

    def announce() -> None:
        sys.stderr.write(
            f"epimem is listening on http://{shown}:{port} (data: {where}); API docs at /docs. "
            "This command blocks: use another terminal; Ctrl+C stops it.\n"
        )
        sys.stderr.flush()

    return announce
