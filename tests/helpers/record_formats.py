"""Records as epimem's earlier formats wrote them (memory.store.codec reads them; nothing writes them now)."""

from __future__ import annotations

import json
from typing import Any

from memory.store import codec
from memory.store.record_format import payload, stamp


def second_format(text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The second format's metadata: the text under TEXT_KEY, the packed keys in one JSON value under
    PACKED_KEY (no document)."""
    kept, packed = codec.packed_apart(metadata)
    if packed:
        kept[codec.PACKED_KEY] = json.dumps(packed, ensure_ascii=False, separators=(",", ":"))
    return {**kept, codec.TEXT_KEY: text}


def third_format(text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The third format's metadata: the stamped payload ``[text, packed keys]`` in one value under BODY_KEY (no
    document)."""
    kept, packed = codec.packed_apart(metadata)
    return {**kept, codec.BODY_KEY: stamp() + payload(text, packed)}
