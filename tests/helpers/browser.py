"""Debian's chromium for the browser tests, driven by Playwright (which downloads no browser of its own)."""

from __future__ import annotations

import os
import shutil

import pytest

ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# No name resolves but the loopback: the browser has no network beyond this machine's servers.
OFFLINE_ARGS = [*ARGS, "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"]


def chromium_or_skip() -> str:
    """Chromium's path; without it the test skips, except when CI is set (then it fails)."""
    found = os.environ.get("EPIMEM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed, and CI is set: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium); the browser tests need it")
    return found
