"""Near-duplicate hits: the same story told twice (a re-imported session, a summary's twin) shows once."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from memory.readmodel.reader import unit
from retrieval.types import SearchHit

# Two hits whose episode vectors are at least this similar are near-duplicates: the lower one goes.
DUPLICATE_COSINE = 0.95


def drop_near_duplicates(hits: list[SearchHit], vectors: dict[str, np.ndarray], *, limit: int) -> list[SearchHit]:
    """Keep hits in order, dropping any whose episode repeats a kept one of the same type: the
    same text (case and whitespace folded), or an episode vector with cosine >= DUPLICATE_COSINE."""
    window = hits[: limit * 2]
    kept: list[SearchHit] = []
    # Per episode type: a summary is never the duplicate of an episode it compacts.
    kept_vectors: dict[str, list[np.ndarray]] = defaultdict(list)
    fingerprints: set[tuple[str, str]] = set()
    for hit in window:
        kind = hit.episode.episode_type.value
        fingerprint = (kind, " ".join(hit.episode.content.lower().split()))
        if fingerprint in fingerprints:
            continue
        vector = vectors.get(hit.episode.uuid)
        if vector is not None:
            direction = unit(vector)
            same_kind = kept_vectors[kind]
            if same_kind and float(np.max(np.stack(same_kind) @ direction)) >= DUPLICATE_COSINE:
                continue
            same_kind.append(direction)
        fingerprints.add(fingerprint)
        kept.append(hit)
        if len(kept) >= limit:
            break
    return kept
