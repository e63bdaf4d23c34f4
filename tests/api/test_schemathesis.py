"""Property-based tests of the whole HTTP API from its OpenAPI schema (schemathesis): valid and invalid
requests for every operation must never produce a 5xx, and every response must match the schema
(status documented, body and content type as declared). Bounded: a few examples per operation."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api.facade import Epimem
from api.server import create_app
from api.settings import Settings
from memory.embedding.embedder import SentenceTransformerEmbedder

# Processes, browsers, restarts or many rounds: in the whole command, not the quick loop.
pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 10
KEY = "schemathesis-admin-key-0123456789"


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: object, value: object) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()


@schemathesis.serializer("application/gzip")  # a restore's body: whatever bytes, refused unless a backup
def _gzip(ctx: object, value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Iterator[object]:
    data: Path = tmp_path_factory.mktemp("schemathesis")
    keys = data / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": KEY, "groups": ["*"], "role": "admin"}]}))
    service = Epimem.from_settings(
        Settings(data_dir=data / "data", api_keys_file=keys), background=False, embedder=embedder
    )
    # Some data, so that reads also run over non-empty groups (schemathesis picks ids from examples).
    service.add_messages(
        "team-a",
        "chat-1",
        [{"id": f"m{i}", "content": f"Caroline adopted a dog called Rex, turn {i}."} for i in range(4)],
    )
    service.flush("team-a", "chat-1")
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(service))
    service.close()


def test_no_input_produces_a_server_error_or_a_schema_violation(api: object) -> None:
    operations = [result.ok() for result in api.get_all_operations()]  # type: ignore[attr-defined]
    assert len(operations) >= 20
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.NEGATIVE and not (operation.path_parameters or operation.query or operation.body):
                continue  # nothing to make invalid (/healthz, /readyz, /metrics)
            # The key is fixed (an admin key for every group); schemathesis also replays each request
            # without it and expects a 401.
            strategy = operation.as_strategy(generation_mode=mode, headers={"Authorization": f"Bearer {KEY}"})

            @given(case=strategy)
            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case: schemathesis.Case) -> None:
                # Valid-looking requests may still be refused for what the schema cannot express
                # (unknown ids -> 404, a conflicting message id -> 409); every other check applies.
                case.call_and_validate(excluded_checks=[positive_data_acceptance])

            began = time.monotonic()
            check()
            print(f"{time.monotonic() - began:6.2f}s {mode.value:8} {operation.label}")
