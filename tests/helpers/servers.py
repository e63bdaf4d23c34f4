"""Real servers for the tests, on free ports of 127.0.0.1: the epimem app on uvicorn in a thread, epimem as a
process (`epimem serve`, `uvicorn --factory api.server:serve_app`), and `chroma run`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx
import uvicorn
from fastapi import FastAPI

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from helpers.http_client import HTTP
from helpers.paths import BIN, ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _StartedInWith:
    """``with server:`` starts it (stopping what a failed start left behind) and stops it at the end."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class AppServer(_StartedInWith):
    """The epimem app on a real uvicorn server in a thread (what `epimem serve` runs), on a free port.

    Started (``start()`` or ``with``), it listens and the app's startup recovery has finished: the recovery forms
    pending sessions in the background, and a test that writes and flushes while it runs could see its episodes
    formed by the recovery instead."""

    def __init__(self, target: Epimem | FastAPI, *, host: str = "127.0.0.1", settings: Settings | None = None) -> None:
        self.service = target if isinstance(target, Epimem) else None
        self.app = create_app(target, settings) if isinstance(target, Epimem) else target
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host=host, port=self.port, log_config=None, access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout: float = 30.0, recovery_timeout: float = 120.0) -> AppServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped before it started"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        deadline = time.monotonic() + recovery_timeout
        while self.app.state.recovering:
            assert time.monotonic() < deadline, "startup recovery did not finish"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.ident is not None:  # started
            self.thread.join(timeout=30)


class ServerProcess(_StartedInWith):
    """An epimem server as a real process answering on 127.0.0.1 (``command`` serves on ``port``); started, it
    answers ``/readyz``."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        port: int,
        env: Mapping[str, str],
        log: Path | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.command, self.port, self.env, self.log, self.cwd = list(command), port, dict(env), log, cwd
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def serve(cls, *args: str, env: Mapping[str, str], log: Path | None = None, cwd: Path = ROOT) -> ServerProcess:
        """``epimem serve --port <free port> *args``."""
        port = free_port()
        return cls([str(BIN / "epimem"), "serve", "--port", str(port), *args], port=port, env=env, log=log, cwd=cwd)

    @classmethod
    def uvicorn(cls, env: Mapping[str, str], *, port: int | None = None, log: Path | None = None) -> ServerProcess:
        """``uvicorn --factory api.server:serve_app`` (what ``epimem serve --workers N`` runs)."""
        port = port or free_port()
        command = [sys.executable, "-m", "uvicorn", "--factory", "api.server:serve_app", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
        return cls(command, port=port, env=env, log=log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log and self.log.exists() else ""

    def start(self, timeout: float = 180.0) -> ServerProcess:
        output: Any = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            self.command, env=self.env, cwd=self.cwd, stdout=output, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, f"the server exited with {self.process.returncode}\n{self.output()}"
            assert time.monotonic() < deadline, f"the epimem server did not become ready\n{self.output()}"
            try:
                if HTTP.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)

    def wait_recovered(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while HTTP.get(self.url + "/readyz", timeout=5).json().get("recovering"):
            assert time.monotonic() < deadline, "startup recovery did not finish"
            time.sleep(0.2)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 60.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def chroma_executable() -> str:
    local = BIN / "chroma"
    return str(local) if local.exists() else (shutil.which("chroma") or "chroma")


class ChromaServer:
    """A real `chroma run` process on 127.0.0.1, started and stopped by the tests."""

    def __init__(self, path: Path, *, index_cache: int | None = None, open_files: int | None = None) -> None:
        """``index_cache``: at most this many vector indexes kept open (Chroma's LRU index cache, in a config
        file: ``chroma run`` takes no flag for it); ``open_files``: the process's open-files limit (soft)."""
        self.path = path
        self.port = free_port()
        self.index_cache = index_cache
        self.open_files = open_files
        self.process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        if self.index_cache is None:
            return [
                chroma_executable(),
                "run",
                "--path",
                str(self.path),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ]
        config = self.path.parent / f"chroma-{self.port}.yaml"
        config.write_text(
            f"persist_path: {json.dumps(str(self.path))}\nlisten_address: 127.0.0.1\nport: {self.port}\n"
            "segment_manager:\n  hnsw_index_pool_cache_config:\n    lru:\n"
            f"      capacity: {self.index_cache}\n"
        )
        return [chroma_executable(), "run", str(config)]

    def open_file_count(self) -> int:
        """The files the server process holds open now (Linux: its /proc entry)."""
        assert self.process is not None
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.path.parent / f"chroma-{self.port}.log", "ab")  # noqa: SIM115 - kept open for the process
        command = self._command()
        if self.open_files is not None:  # the shell lowers its soft limit, then becomes the server
            command = ["sh", "-c", f'ulimit -n {self.open_files} && exec "$@"', "chroma", *command]
        # Warnings and errors only: Chroma logs every request at INFO (about a twentieth of its CPU, and
        # tens of MB of log over the suite). RUST_LOG set by the caller wins.
        env = {"RUST_LOG": "warn", **os.environ}
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if HTTP.get(f"http://127.0.0.1:{self.port}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"chroma run exited with {self.process.returncode}")
            time.sleep(0.1)
        raise RuntimeError("chroma run did not become ready")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
