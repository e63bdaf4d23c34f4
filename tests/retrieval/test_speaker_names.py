"""The speaker names learned from a group's messages, patched with its read snapshot when a write only adds
later messages, learned anew otherwise, and always the names one pass over every message learns."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from helpers.builders import T0, messages

from api.facade import Epimem
from retrieval.names import learned_names
from retrieval.speaker_names import LEARNED_NAMES, MESSAGE, LearnedNames, speaker_names

TEXT = ("Hey Mel, the dog Rex swam in the lake.", "Thanks Caro! Rex loves the lake.")


def learned(service: Epimem, group_id: str) -> LearnedNames:
    service.search(group_id, "Where did Rex swim?", k=2)  # the read path takes (or patches) the snapshot
    reader = service.read_model.reader(group_id)
    snapshot = reader.columns
    assert reader.version == service.read_model.snapshot(group_id).version
    found = reader.derived(LEARNED_NAMES)  # the one the search kept (or patched), not built here
    order = [p for p in np.argsort(snapshot.timestamps, kind="stable").tolist() if snapshot.kinds[p] == MESSAGE]
    said = [(snapshot.producers[p], snapshot.produced_for[p], snapshot.documents[p]) for p in order]
    assert found.names == learned_names(said), "as one pass over every message learns them"
    return found


def test_later_messages_patch_the_learned_names_and_anything_else_learns_again(service: Epimem, group_id: str) -> None:
    def add(prefix: str, count: int, hours: float, **fields: object) -> None:
        batch = messages(count, prefix=prefix, start=T0 + timedelta(hours=hours), text=lambda i: TEXT[i % 2])
        service.add_messages(group_id, "s", [m | fields for m in batch])

    add("a", 6, 0)
    first = learned(service, group_id)
    assert first.fed == 6 and first.names == {"melanie": {"mel"}, "caroline": {"caro"}}
    add("b", 2, 1)  # later: fed to the kept fold
    assert learned(service, group_id).fed == 2
    add("c", 1, -1)  # dated before the last message: learned anew
    assert learned(service, group_id).fed == 9
    add("d", 1, 2, producer_id="Ben")  # a new speaker changes whom a message without addressee answers
    assert learned(service, group_id).fed == 10
    service.search(group_id, "Did Mel swim?", k=2)
    assert speaker_names(service.read_model.reader(group_id))["melanie"] == {"mel"}
