"""The operator's calls of a running epimem, on ``EpimemClient`` and ``AsyncEpimemClient`` with the Python
facade's method names: retention policies and sweeps (an admin key of the group; reading a policy: read),
webhook subscriptions and their delivery logs (an admin key for every group, ``*``).

    with EpimemClient(url, api_key=ADMIN_KEY) as client:
        client.set_retention("team-a", {"max_age_days": 30})
        preview = client.sweep_retention("team-a", dry_run=True)  # what a sweep would erase, nothing changed

Keys and limits are ``epimem_client.keys.KeyAdmin``; backups and restores, ``epimem backup`` / ``restore``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from epimem_client._calls import Call, _model, _part, group_path, path_segment, session_path
from epimem_client.models import (
    Cleared,
    DeliveryLog,
    RetentionPolicies,
    RetentionReceipt,
    StoredPolicy,
    WebhookOut,
    WebhooksOut,
)

T = TypeVar("T")


def _retention_path(group_id: str, session_id: str | None) -> str:
    return (group_path(group_id) if session_id is None else session_path(group_id, session_id)) + "/retention"


def _webhook_path(subscription_id: str) -> str:
    return f"/v1/webhooks/{path_segment(subscription_id)}"


def _nothing(_response: Any) -> None:
    return None


class OperationCalls:
    """Each operation once, as a ``Call`` (request + parser)."""

    @staticmethod
    def set_retention(group_id: str, policy: BaseModel | dict[str, Any], session_id: str | None) -> Call[StoredPolicy]:
        body = policy.model_dump(mode="json", exclude_none=True) if isinstance(policy, BaseModel) else policy
        return Call("PUT", _retention_path(group_id, session_id), _model(StoredPolicy), json=body)

    @staticmethod
    def clear_retention(group_id: str, session_id: str | None) -> Call[bool]:
        return Call("DELETE", _retention_path(group_id, session_id), _part(Cleared, "cleared"))

    @staticmethod
    def retention(group_id: str) -> Call[RetentionPolicies]:
        return Call("GET", _retention_path(group_id, None), _model(RetentionPolicies))

    @staticmethod
    def sweep_retention(group_id: str, dry_run: bool) -> Call[RetentionReceipt]:
        path = _retention_path(group_id, None) + "/sweep"
        return Call("POST", path, _model(RetentionReceipt), params={"dry_run": "true" if dry_run else "false"})

    @staticmethod
    def create_webhook(url: str, secret: str, groups: list[str], description: str | None) -> Call[WebhookOut]:
        body: dict[str, Any] = {"url": url, "secret": secret, "groups": groups}
        if description is not None:
            body["description"] = description
        return Call("POST", "/v1/webhooks", _model(WebhookOut), json=body)

    @staticmethod
    def webhook_subscriptions() -> Call[list[WebhookOut]]:
        return Call("GET", "/v1/webhooks", _part(WebhooksOut, "webhooks"))

    @staticmethod
    def delete_webhook(subscription_id: str) -> Call[None]:
        return Call("DELETE", _webhook_path(subscription_id), _nothing)

    @staticmethod
    def webhook_deliveries(subscription_id: str, limit: int) -> Call[DeliveryLog]:
        path = _webhook_path(subscription_id) + "/deliveries"
        return Call("GET", path, _model(DeliveryLog), params={"limit": limit})


class Operations:
    """The synchronous client's operator calls (mixed into ``EpimemClient``)."""

    def _do(self, call: Call[T]) -> T:
        raise NotImplementedError

    def set_retention(
        self, group_id: str, policy: BaseModel | dict[str, Any], *, session_id: str | None = None
    ) -> StoredPolicy:
        """Keep the group's (or one session's) messages ``{"max_age_days": N, "by": "timestamp"|"arrival"}``."""
        return self._do(OperationCalls.set_retention(group_id, policy, session_id))

    def clear_retention(self, group_id: str, *, session_id: str | None = None) -> bool:
        return self._do(OperationCalls.clear_retention(group_id, session_id))

    def retention(self, group_id: str) -> RetentionPolicies:
        return self._do(OperationCalls.retention(group_id))

    def sweep_retention(self, group_id: str, *, dry_run: bool = False) -> RetentionReceipt:
        """Erase now what the policies say is too old (``dry_run``: list it, change nothing)."""
        return self._do(OperationCalls.sweep_retention(group_id, dry_run))

    def create_webhook(self, url: str, secret: str, groups: list[str], *, description: str | None = None) -> WebhookOut:
        return self._do(OperationCalls.create_webhook(url, secret, groups, description))

    def webhook_subscriptions(self) -> list[WebhookOut]:
        return self._do(OperationCalls.webhook_subscriptions())

    def delete_webhook(self, subscription_id: str) -> None:
        self._do(OperationCalls.delete_webhook(subscription_id))

    def webhook_deliveries(self, subscription_id: str, *, limit: int = 50) -> DeliveryLog:
        return self._do(OperationCalls.webhook_deliveries(subscription_id, limit))


class AsyncOperations:
    """The asynchronous client's operator calls (mixed into ``AsyncEpimemClient``)."""

    async def _do(self, call: Call[T]) -> T:
        raise NotImplementedError

    async def set_retention(
        self, group_id: str, policy: BaseModel | dict[str, Any], *, session_id: str | None = None
    ) -> StoredPolicy:
        return await self._do(OperationCalls.set_retention(group_id, policy, session_id))

    async def clear_retention(self, group_id: str, *, session_id: str | None = None) -> bool:
        return await self._do(OperationCalls.clear_retention(group_id, session_id))

    async def retention(self, group_id: str) -> RetentionPolicies:
        return await self._do(OperationCalls.retention(group_id))

    async def sweep_retention(self, group_id: str, *, dry_run: bool = False) -> RetentionReceipt:
        return await self._do(OperationCalls.sweep_retention(group_id, dry_run))

    async def create_webhook(
        self, url: str, secret: str, groups: list[str], *, description: str | None = None
    ) -> WebhookOut:
        return await self._do(OperationCalls.create_webhook(url, secret, groups, description))

    async def webhook_subscriptions(self) -> list[WebhookOut]:
        return await self._do(OperationCalls.webhook_subscriptions())

    async def delete_webhook(self, subscription_id: str) -> None:
        await self._do(OperationCalls.delete_webhook(subscription_id))

    async def webhook_deliveries(self, subscription_id: str, *, limit: int = 50) -> DeliveryLog:
        return await self._do(OperationCalls.webhook_deliveries(subscription_id, limit))
