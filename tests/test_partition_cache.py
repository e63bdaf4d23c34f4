"""The bound on vector indexes embedded Chroma keeps loaded (EPIMEM_CHROMA_HNSW_CACHE)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import numpy as np
    from memory.store import open_client

    data_dir, mode = Path(sys.argv[1]), sys.argv[2]
    client = open_client(data_dir=data_dir, host=None, port=0, hnsw_cache=4)
    assert client._server.hnsw_cache_size == 4, client._server.hnsw_cache_size
    rng = np.random.default_rng(1)
    if mode == "create":
        for i in range(12):
            collection = client.get_or_create_collection(f"p-{i}", metadata={"hnsw:space": "cosine"})
            collection.upsert(ids=[f"{i}-{j}" for j in range(20)], embeddings=rng.standard_normal((20, 8)))
    for i in range(12):  # more partitions than the cache holds: evicted ones are reloaded from disk
        found = client.get_collection(f"p-{i}").query(query_embeddings=rng.standard_normal((1, 8)), n_results=20)
        assert sorted(found["ids"][0]) == sorted(f"{i}-{j}" for j in range(20)), i
    print("ok", mode)
    """
)


def run(data_dir: Path, mode: str) -> str:
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(data_dir), mode], capture_output=True, text=True, cwd=root, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_bounded_index_cache_evicts_and_reloads_across_restart(tmp_path: Path) -> None:
    # Fresh processes: the bound is taken when Chroma's system for a folder starts.
    assert "ok create" in run(tmp_path, "create")
    assert "ok read" in run(tmp_path, "read")
