"""Running epimem as a child process: its environment and the command line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.paths import BIN, ROOT

# What would point a child at another folder, key file or Chroma server than the test chose.
OUTSIDE = (
    "EPIMEM_API_KEYS_FILE",
    "EPIMEM_CHROMA_HOST",
    "EPIMEM_CHROMA_TENANT",
    "EPIMEM_CHROMA_DATABASE",
    "EPIMEM_CHROMA_TOKEN",
    "EPIMEM_DATA_DIR",
    "EPIMEM_URL",
    "EPIMEM_API_KEY",
)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment, offline, without the settings of ``OUTSIDE`` (unless given), plus ``extra``."""
    values = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", **extra}
    for name in OUTSIDE:
        if name not in extra:
            values.pop(name, None)
    return values


def epimem(*args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    """``epimem *args`` to the end, in ``clean_env(**extra)``."""
    command = [str(BIN / "epimem"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=clean_env(**extra))


def child_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of an ingesting child (a writer script or a server) that may import the test helpers: small
    episodes, formed after a few messages."""
    return {
        **os.environ,
        "EPIMEM_TEST_ROOT": str(ROOT),
        "EPIMEM_DATA_DIR": str(data_dir),
        "EPIMEM_AUTO_FLUSH_PENDING": "6",
        "EPIMEM_EPISODE_MAX_MESSAGES": "5",
        "HF_HUB_OFFLINE": "1",
        **extra,
    }
