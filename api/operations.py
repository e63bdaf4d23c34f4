"""Running epimem for many tenants, through the facade: retention policies and sweeps
(memory.lifecycle.retention), webhook subscriptions and their delivery logs (memory.webhooks), backups
and restores (memory.upkeep). Mixed into ``api.facade.Epimem``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, Field, ValidationError

from memory.errors import InvalidInputError, NotFoundError
from memory.ids import require_scope_ids
from memory.lifecycle.audit import LOCAL_ACTOR
from memory.lifecycle.backup import BackupSummary
from memory.lifecycle.retention import RetentionPolicy, RetentionReceipt, StoredPolicy
from memory.service import MemoryService
from memory.timeutil import to_utc
from memory.upkeep import RestoreReceipt
from memory.webhooks.hub import DeliveryLog, Webhooks
from memory.webhooks.subscriptions import Subscription, SubscriptionIn


class RetentionPolicies(BaseModel):
    """A group's retention: its own policy, its sessions' own ones."""

    group_id: str
    group: StoredPolicy | None = Field(description="the group's policy (None: none)")
    sessions: list[StoredPolicy] = Field(description="sessions with a policy of their own (it replaces the group's)")


class WebhookOut(BaseModel):
    """A webhook subscription as the surfaces show it: everything but its secret."""

    id: str
    url: str
    groups: list[str]
    created_at: str
    created_by: str
    description: str | None = None


def _public(subscription: Subscription) -> WebhookOut:
    return WebhookOut.model_validate(subscription.public())


def _policy(values: RetentionPolicy | dict[str, Any]) -> RetentionPolicy:
    if isinstance(values, RetentionPolicy):
        return values
    try:
        return RetentionPolicy.model_validate(values)
    except ValidationError as error:
        raise InvalidInputError(error.errors(include_url=False)[0]["msg"]) from error


class Operations:
    memory: MemoryService
    webhooks: Webhooks

    # -- retention ----------------------------------------------------------------------------------

    def set_retention(
        self, group_id: str, policy: RetentionPolicy | dict[str, Any], *, session_id: str | None = None
    ) -> StoredPolicy:
        """Keep the group's (or one session's) messages for at most ``max_age_days``; what is older is erased
        by the next sweep, with what was made from it. A session's policy replaces the group's."""
        require_scope_ids(group_id, session_id)
        return self.memory.put_retention(group_id, _policy(policy), session_id)

    def clear_retention(self, group_id: str, *, session_id: str | None = None) -> bool:
        """Remove the group's (or the session's) policy; False when there was none."""
        require_scope_ids(group_id, session_id)
        return self.memory.clear_retention(group_id, session_id)

    def retention(self, group_id: str) -> RetentionPolicies:
        require_scope_ids(group_id)
        group, sessions = self.memory.retention_policies(group_id)
        if group is None and not sessions and not self.memory.group_exists(group_id):
            raise NotFoundError("group not found")
        return RetentionPolicies(group_id=group_id, group=group, sessions=sorted(sessions.values(), key=_session_of))

    def sweep_retention(
        self, group_id: str, *, dry_run: bool = False, now: datetime | None = None, actor: str = LOCAL_ACTOR
    ) -> RetentionReceipt:
        """Erase what the group's policies say is too old at ``now`` (default: the clock's now), or with
        ``dry_run`` list it without changing anything."""
        require_scope_ids(group_id)
        if not self.memory.group_exists(group_id):
            raise NotFoundError("group not found")
        moment = to_utc(now) if now is not None else None
        return self.memory.sweep_retention(group_id, now=moment, dry_run=dry_run, actor=actor)

    # -- change events --------------------------------------------------------------------------------

    def create_webhook(
        self, url: str, secret: str, groups: list[str], *, description: str | None = None, actor: str = LOCAL_ACTOR
    ) -> WebhookOut:
        """Send every change of the groups' memory to ``url``, signed with ``secret`` (never shown again)."""
        try:
            request = SubscriptionIn(url=url, secret=secret, groups=groups, description=description)
        except ValidationError as error:
            raise InvalidInputError(error.errors(include_url=False)[0]["msg"]) from error
        return _public(self.webhooks.create(request, actor=actor))

    def webhook_subscriptions(self) -> list[WebhookOut]:
        return [_public(subscription) for subscription in self.webhooks.list()]

    def delete_webhook(self, subscription_id: str) -> None:
        self.webhooks.delete(subscription_id)

    def webhook_deliveries(self, subscription_id: str, *, limit: int = 50) -> DeliveryLog:
        if not 1 <= limit <= 100:
            raise InvalidInputError("limit must be between 1 and 100")
        return self.webhooks.deliveries(subscription_id, limit=limit)

    # -- backups --------------------------------------------------------------------------------------

    def backup(self, out: IO[bytes] | Path, *, group_id: str | None = None) -> BackupSummary:
        """Write a backup of every group (or one) into a file; each group is read at one moment
        (memory.upkeep) while the server keeps taking writes."""
        require_scope_ids(group_id)
        if isinstance(out, Path):
            with out.open("wb") as stream:
                return self.memory.backup(stream, group_id=group_id)
        return self.memory.backup(out, group_id=group_id)

    def restore(self, path: Path) -> RestoreReceipt:
        """Write a backup into this server, which must hold none of its groups (none at all for a
        server's backup). The file is checked whole before anything is written."""
        return self.memory.restore(Path(path))


def _session_of(policy: StoredPolicy) -> str:
    return policy.session_id or ""
