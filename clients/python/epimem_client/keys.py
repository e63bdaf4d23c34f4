"""Keys and limits of a running epimem, for an admin of every group (``epimem keys`` uses it):

    from epimem_client import EpimemClient
    from epimem_client.keys import KeyAdmin
    with EpimemClient(url, api_key=ADMIN_KEY) as client:
        made = KeyAdmin(client).create("support-bot", ["team-a"], "write", limits={"messages_per_day": 10_000})
        print(made.key)  # the secret, shown this once

Results are the wire models below (``tests/api/test_client_models.py`` compares them with the server's)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from epimem_client._calls import Call, _model, group_path, path_segment
from epimem_client.client import EpimemClient
from epimem_client.models import WireModel


class KeyOut(WireModel):
    id: str
    name: str
    groups: list[str]
    role: str
    status: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    source: str
    limits: dict[str, float]
    effective_limits: dict[str, float]
    usage: dict[str, int] = {}


class KeyCreated(KeyOut):
    key: str


class KeysOut(WireModel):
    keys: list[KeyOut]


class GroupUsageOut(WireModel):
    group_id: str
    limits: dict[str, float]
    effective_limits: dict[str, float]
    usage: dict[str, int]


class UsageRow(WireModel):
    kind: str
    id: str
    messages_today: int


class UsageOut(WireModel):
    day: str
    rows: list[UsageRow]


def _key_path(key_id: str) -> str:
    return f"/v1/keys/{path_segment(key_id)}"


class KeyAdmin:
    """The key and limit routes over an ``EpimemClient`` (its URL and key)."""

    def __init__(self, client: EpimemClient) -> None:
        self._client = client

    def create(
        self,
        name: str,
        groups: list[str],
        role: str,
        *,
        expires_at: datetime | None = None,
        limits: dict[str, float] | None = None,
    ) -> KeyCreated:
        body: dict[str, Any] = {"name": name, "groups": groups, "role": role}
        if expires_at is not None:
            body["expires_at"] = expires_at.isoformat()
        if limits:
            body["limits"] = limits
        return self._client._do(Call("POST", "/v1/keys", _model(KeyCreated), json=body))

    def list(self) -> list[KeyOut]:
        return self._client._do(Call("GET", "/v1/keys", _model(KeysOut))).keys

    def revoke(self, key_id: str) -> KeyOut:
        return self._client._do(Call("DELETE", _key_path(key_id), _model(KeyOut)))

    def rotate(self, key_id: str) -> KeyCreated:
        return self._client._do(Call("POST", _key_path(key_id) + "/rotate", _model(KeyCreated)))

    def set_limits(self, key_id: str, limits: dict[str, float]) -> KeyOut:
        return self._client._do(Call("PUT", _key_path(key_id) + "/limits", _model(KeyOut), json=limits))

    def set_group_limits(self, group_id: str, limits: dict[str, float]) -> GroupUsageOut:
        return self._client._do(Call("PUT", group_path(group_id) + "/limits", _model(GroupUsageOut), json=limits))

    def group_usage(self, group_id: str) -> GroupUsageOut:
        return self._client._do(Call("GET", group_path(group_id) + "/usage", _model(GroupUsageOut)))

    def usage(self) -> UsageOut:
        return self._client._do(Call("GET", "/v1/usage", _model(UsageOut)))
