"""What checking an API key costs a request, with the keys in the key store (a lookup by the key's id, then one
HMAC of the secret once its salted hash has passed) and, as before, read from the keys file (every key compared
with ``hmac.compare_digest``); interleaved in one process. Also: the first check of a secret (the scrypt hash),
and the recheck a server runs every ``EPIMEM_KEYS_RECHECK_S`` (one read of the store's stamp), on embedded
Chroma.

    python tests/benchmarks/key_check_cost.py              # 50 keys, 20,000 checks each
    python tests/benchmarks/key_check_cost.py --keys 10 --checks 2000   # short form
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _common as c

from api.access.live_keys import LiveKeys
from api.auth import KeyRing
from memory.store.connection import close_embedded, open_connection
from memory.store.factory import open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--checks", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        secrets = [f"a-long-random-secret-number-{i:06d}" for i in range(args.keys)]
        keys_file = Path(folder) / "keys.json"
        entries = [{"key": s, "groups": [f"team-{i}"], "role": "write"} for i, s in enumerate(secrets)]
        keys_file.write_text(json.dumps({"keys": entries}))
        from_file = KeyRing.from_file(keys_file)
        from_store = KeyRing.from_file(keys_file)
        data = Path(folder) / "data"
        connection = open_connection(data_dir=data, host=None, port=0)
        store = open_store(connection, model_id="none")
        live = LiveKeys(store.keys, recheck_s=1.0)
        started = time.perf_counter()
        from_store.attach(live)  # seeds the store: one scrypt hash per key
        c.line("seed (hash and write every key)", keys=args.keys, seconds=time.perf_counter() - started)
        headers = [{"authorization": f"Bearer {s}"} for s in secrets]
        first = []
        for header in headers:  # the first check of each secret verifies its scrypt hash
            first.append(c.timed(lambda h=header: from_store.authenticate(h))[0])  # type: ignore[misc]
        c.line("first check of a secret", **c.summary(first))
        times = c.interleaved(
            {
                "key store (per request)": lambda i: from_store.authenticate(headers[i % len(headers)]),
                "keys file (per request)": lambda i: from_file.authenticate(headers[i % len(headers)]),
            },
            args.checks,
        )
        for name, values in times.items():
            c.line(name, **{k: v * 1000 for k, v in c.summary(values).items()}, unit="us")
        rechecks = [c.timed(live.refresh)[0] for _ in range(200)]
        c.line("recheck (stamp unchanged)", **c.summary(rechecks))
        close_embedded(data)


if __name__ == "__main__":
    main()
