"""What a group erased, remembered without the erased text: the ids of deleted messages, episodes, summaries and
sessions and of redacted messages, and each deleted or redacted message as what was said (its session, its time
and its exact text: the same utterance under any id), each as a one-way digest (SHA-256, cut to 128 bits), never
the id or the text itself, so that the data folder keeps no byte of them (docs/trust.md).

An import reads them to refuse what a deletion or a redaction erased (memory.lifecycle.importing: a message, an
episode or a session of an older export is not brought back, nor an erased message under another id); a
redaction reads them to tell a message it redacted itself from one that merely carries the mark. They live in
the group's log (kind ``tombstone``, one record per erasure, at most ``PER_RECORD`` digests each): deleting the
group deletes them with everything else.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterable
from enum import StrEnum

from memory.models import Message
from memory.receipts import DeletionReceipt
from memory.store.protocols import LogWriter

KIND = "tombstone"
PER_RECORD = 250
ANY_SESSION = ""  # episodes and summaries are remembered by id alone


class Erased(StrEnum):
    MESSAGE = "message"  # (session, message id): deleted
    EPISODE = "episode"  # (any session, episode or summary id): deleted
    SESSION = "session"  # (the session, its id): deleted
    REDACTED = "redacted"  # (session, message id): its text replaced by a redaction
    SAID = "said"  # (session, a message's time and exact text): deleted or redacted, under any id


Key = tuple[Erased, str, str]  # what, session, id


def digest(key: Key) -> str:
    kind, session_id, record_id = key
    text = f"{kind.value}\x1f{session_id}\x1f{record_id}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).hexdigest()[:32]


class Tombstones:
    def __init__(self, log: LogWriter) -> None:
        self._log = log

    def bury(self, group_id: str, keys: Iterable[Key]) -> int:
        """Remember ``keys`` as erased; returns how many digests were written."""
        digests = sorted({digest(key) for key in keys})
        stamp = f"tomb-{time.time_ns():020d}-{secrets.token_hex(4)}"
        for start in range(0, len(digests), PER_RECORD):
            part = digests[start : start + PER_RECORD]
            self._log.put_record(group_id, f"{stamp}-{start // PER_RECORD:06d}", json.dumps(part), {"kind": KIND})
        return len(digests)

    def digests(self, group_id: str) -> set[str]:
        """Every digest the group remembers."""
        return {item for _, document, _ in self._log.records(group_id, KIND) for item in json.loads(document)}

    def erased(self, group_id: str, keys: Iterable[Key]) -> list[Key]:
        """Those of ``keys`` the group erased, in their order."""
        wanted = list(keys)
        if not wanted:
            return []
        known = self.digests(group_id)
        return [key for key in wanted if digest(key) in known]


def said(session_id: str, message: Message) -> Key:
    """A message as what was said (its session, time and exact text), whatever its id."""
    return Erased.SAID, session_id, f"{message.timestamp.isoformat()}\x1f{message.content}"


def deleted_keys(
    session_id: str, receipt: DeletionReceipt, *, messages: Iterable[Message] = (), session: bool = False
) -> list[Key]:
    """The keys of what one delete in a session removed: its messages (by id, and as what was said), its episodes
    and summaries by id alone, the session itself when ``session``."""
    keys: list[Key] = [(Erased.MESSAGE, session_id, m) for m in receipt.messages]
    keys += [(Erased.EPISODE, ANY_SESSION, e) for e in [*receipt.episodes, *receipt.summaries]]
    keys += [said(session_id, message) for message in messages]
    if session:
        keys.append((Erased.SESSION, session_id, session_id))
    return keys
