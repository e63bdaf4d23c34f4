"""JSON text that stays on one line for every line reader.

JSON escapes the control characters below U+0020 but leaves U+0085 (next line), U+2028 (line
separator) and U+2029 (paragraph separator) as they are, and readers that split on every Unicode
line end (Python's ``str.splitlines``, ``io`` in some modes, editors, log shippers) cut a record
there. They can occur only inside JSON strings, so writing them as ``\\uXXXX`` escapes keeps the
text valid JSON that reads back to the same value."""

from __future__ import annotations

_ESCAPES = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def one_line(json_text: str) -> str:
    """``json_text`` (``json.dumps`` output) with the Unicode line ends JSON leaves raw escaped."""
    return json_text.translate(_ESCAPES)
