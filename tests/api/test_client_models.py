"""The client's wire models (``epimem_client.models``) cannot drift from what the server sends: each has the
same fields, of the same JSON types, as the response schema of the same name in the server's OpenAPI
document. (``tests/api/test_client.py`` parses real responses with them.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from api.server import create_app
from api.settings import Settings
from epimem_client import keys, models

WIRE_MODELS = [
    cls
    for module in (models, keys)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, models.WireModel) and cls is not models.WireModel
]


@pytest.fixture(scope="module")
def server_schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = Path(tmp_path_factory.mktemp("openapi"))
    return create_app(settings=Settings(data_dir=data)).openapi()["components"]["schemas"]


def shape(schema: dict[str, Any], definitions: dict[str, Any]) -> Any:
    """A property's JSON type, with references resolved: enums are strings, models are their name."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        target = definitions[name]
        return shape(target, definitions) if "enum" in target else name
    if "anyOf" in schema:
        return frozenset(shape(option, definitions) for option in schema["anyOf"])
    if "enum" in schema or "const" in schema:
        return "string"
    kind = schema.get("type")
    if kind == "array":
        return ("array", shape(schema.get("items", {}), definitions))
    if kind == "string" and schema.get("format") == "date-time":
        return "date-time"
    return kind


def fields(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    return {name: shape(value, definitions) for name, value in schema["properties"].items()}


@pytest.mark.slow
def test_every_response_model_of_the_client_exists_on_the_server(server_schemas: dict[str, Any]) -> None:
    assert len(WIRE_MODELS) >= 17
    missing = [cls.__name__ for cls in WIRE_MODELS if cls.__name__ not in server_schemas]
    assert missing == []


@pytest.mark.parametrize("model", WIRE_MODELS, ids=lambda cls: cls.__name__)
def test_the_client_model_has_the_server_fields_and_types(
    model: type[BaseModel], server_schemas: dict[str, Any]
) -> None:
    client_schema = model.model_json_schema(ref_template="#/$defs/{model}")
    client = fields(client_schema, client_schema.get("$defs", {}))
    server = fields(server_schemas[model.__name__], server_schemas)
    assert client == server


def test_the_comparison_sees_a_missing_field_and_a_wrong_type(server_schemas: dict[str, Any]) -> None:
    class Citation(models.WireModel):  # one field short, one of another type
        episode_id: str
        session_id: int
        timestamp: str
        pending: bool = False

    schema = Citation.model_json_schema()
    drifted = fields(schema, {})
    server = fields(server_schemas["Citation"], server_schemas)
    assert set(server) - set(drifted) == {"marker", "message_ids", "excerpts"}
    assert drifted["session_id"] != server["session_id"] and drifted["timestamp"] != server["timestamp"]
