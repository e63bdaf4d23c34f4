"""Writes the table of docs/configuration.md from ``api.settings.Settings``: every setting, its environment
variable, its default, its bounds and its meaning (the field's description). ``--check`` writes nothing and exits
1 when the page and ``Settings`` disagree (tests/integration/test_docs.py runs it).

    .venv/bin/python scripts/settings_page.py            # after adding or changing a setting
    .venv/bin/python scripts/settings_page.py --check
"""

from __future__ import annotations

import argparse
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotated_types import Ge, Gt, Le, Lt  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

from api.settings import Settings  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
MARKER = "<!-- Generated from api/settings.py by scripts/settings_page.py: edit the settings, then run it. -->"


def default_text(name: str, field: FieldInfo) -> str:
    value = field.get_default()
    if value is None:
        return "unset"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Path) and not value.is_absolute():
        return f"`./{value}`"
    if name.endswith("_bytes") and isinstance(value, int) and value % 1024**2 == 0:
        return f"`{value}` ({value // 1024**2:,} MiB)"
    return f"`{value}`"


def literal_choices(annotation: Any) -> tuple[Any, ...] | None:
    for option in (annotation, *get_args(annotation)):
        if get_origin(option) is Literal:
            return get_args(option)
    return None


def bounds_text(field: FieldInfo) -> str:
    """The allowed values: a Literal's choices, or the numeric bounds."""
    choices = literal_choices(field.annotation)
    if choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in choices)
    parts = []
    for rule in field.metadata:
        for kind, symbol in ((Ge, "≥"), (Gt, ">"), (Le, "≤"), (Lt, "<")):
            if isinstance(rule, kind):
                parts.append(f"{symbol} {getattr(rule, kind.__name__.lower())}")
    return ", ".join(parts)


def one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table() -> str:
    rows = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        prefix: Any = Settings.model_config.get("env_prefix", "")
        variable = f"`{prefix}{name.upper()}`"
        cells = (variable, default_text(name, field), bounds_text(field), one_line(field.description or ""))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def page(current: str) -> str:
    """The page with everything after the marker replaced by the table."""
    head, found, _ = current.partition(MARKER)
    if not found:
        raise SystemExit(f"{PAGE} has no marker line {MARKER!r}")
    return f"{head}{MARKER}\n\n{table()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not what Settings gives")
    args = parser.parse_args(argv)
    current = PAGE.read_text(encoding="utf-8")
    wanted = page(current)
    if args.check:
        if current != wanted:
            print(
                f"{PAGE.relative_to(ROOT)} disagrees with api/settings.py: run scripts/settings_page.py",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(Settings.model_fields)} settings)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
