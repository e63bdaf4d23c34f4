"""Where the benchmark data is: one rule for the tests, the notebooks and the benchmark scripts.

1. ``EPIMEM_BENCHMARK_DATA``, if set: a LoCoMo file, or a folder holding ``locomo-dev.json`` (and
   ``realtalk-dev/``), e.g. ``../shared/data``. A value that points at neither is an error, never
   silently replaced.
2. Otherwise ``../shared/data`` beside the repository, when it holds ``locomo-dev.json``.
3. Otherwise the small conversation dataset the project ships, ``examples/conversations.json``
   (written for epimem, in the LoCoMo format, with questions and evidence), so a fresh clone with
   nothing beside it runs every test and notebook.

Standard library only: notebooks and scripts import it before anything else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

ENV = "EPIMEM_BENCHMARK_DATA"
ROOT = Path(__file__).resolve().parents[2]
LOCOMO_NAME = "locomo-dev.json"
REALTALK_NAME = "realtalk-dev"
SHIPPED = ROOT / "examples" / "conversations.json"


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def data_folder(root: Path = ROOT, environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder of the external benchmark data, or None when there is none (the shipped dataset is used)."""
    value = _environ(environ).get(ENV)
    if value:
        path = Path(value).expanduser()
        if path.is_file():
            return path.parent
        if path.is_dir():
            return path
        raise FileNotFoundError(f"{ENV}={path} does not exist")
    beside = root.parent / "shared" / "data"
    return beside if (beside / LOCOMO_NAME).is_file() else None


def locomo_file(root: Path = ROOT, environ: Mapping[str, str] | None = None) -> Path:
    """The LoCoMo-format file to use (see the module's docstring for the order)."""
    value = _environ(environ).get(ENV)
    if value:
        path = Path(value).expanduser()
        if path.is_file():
            return path
        if (path / LOCOMO_NAME).is_file():
            return path / LOCOMO_NAME
        raise FileNotFoundError(f"{ENV}={path} is neither a LoCoMo file nor a folder holding {LOCOMO_NAME}")
    beside = root.parent / "shared" / "data" / LOCOMO_NAME
    return beside if beside.is_file() else root / "examples" / SHIPPED.name


def realtalk_folder(root: Path = ROOT, environ: Mapping[str, str] | None = None) -> Path | None:
    """The REALTALK chats (``realtalk-dev/``) in the benchmark data folder, or None."""
    folder = data_folder(root, environ)
    found = folder / REALTALK_NAME if folder is not None else None
    return found if found is not None and found.is_dir() else None


def is_shipped(path: Path) -> bool:
    """True for the project's own small dataset (figures on it are not LoCoMo figures)."""
    return path.resolve() == SHIPPED.resolve() or path.name == SHIPPED.name and path.parent.name == "examples"


def sample_id(path: Path, wanted: str) -> str:
    """``wanted`` when the file holds that sample (a LoCoMo conversation), else the file's first sample."""
    ids = [str(sample["sample_id"]) for sample in json.loads(path.read_text(encoding="utf-8"))]
    if not ids:
        raise ValueError(f"{path} holds no samples")
    return wanted if wanted in ids else ids[0]
