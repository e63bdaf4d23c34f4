"""Large reads and writes in pieces: the page every read of many records goes through, and the batch
a write of many records is cut into."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Records per read. Chroma keeps much of what one large read allocated: a group index of 20,000 records read
# in pages of 5,000 left the process 312 MB larger after the pages were freed, in pages of 1,000 90 MB
# (partitions.py data, docs/benchmarks-speed.md); the first search's peak fell from 1,013 to 825 MB.
PAGE = 1000
WRITE_BATCH = 4000  # records per Chroma write (its embedded limit is a little over 5,000)


def pages(collection: Any, include: list[Any], **kwargs: Any) -> Iterator[Any]:
    """Every record matching ``kwargs`` (e.g. ``where``), one ``get`` result of up to PAGE records at a time.

    The matching ids are listed first (one ``get`` without documents), then read PAGE ids at a time:
    paging by offset made Chroma filter and skip again for every page (a log of 63,000 records: 12.2 s
    with ``where``, 6.2 s without, 3.2 s by ids; listing the ids 0.2 s), and a write landing between
    two pages could shift a record out of both."""
    ids = collection.get(include=[], **kwargs)["ids"]
    for start in range(0, len(ids), PAGE):
        yield collection.get(ids=ids[start : start + PAGE], include=include)
