"""The HTTP routes of running epimem for many tenants: retention policies and sweeps (read the policies
with read, change them and sweep with admin of the group), webhook subscriptions and their delivery logs,
backups and restores (admin of every group, ``*``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from api.auth import Principal
from api.errors import PayloadTooLargeError
from api.http.error_handling import error_responses
from api.http.params import GroupId, GroupIdQuery, SessionId
from api.http.routes import ADMIN, GROUP, READ, SERVER_ADMIN, SESSION, ServiceDep, SettingsDep
from api.operations import RetentionPolicies, WebhookOut
from memory.errors import NotFoundError
from memory.lifecycle.retention import RetentionPolicy, RetentionReceipt, StoredPolicy
from memory.upkeep import RestoreReceipt
from memory.webhooks.hub import DeliveryLog
from memory.webhooks.subscriptions import SubscriptionIn

operations = APIRouter(prefix="/v1", responses=error_responses(401, 403, 404, 409, 413, 415, 422, 503))

BACKUP_TYPE = "application/gzip"
SubscriptionId = Annotated[str, PathParam(min_length=1, max_length=64, pattern=r"^[0-9a-f]+$", description="its id")]


class Cleared(BaseModel):
    cleared: bool = Field(description="false when there was no policy to clear")


class WebhooksOut(BaseModel):
    webhooks: list[WebhookOut]


# -- retention -----------------------------------------------------------------------------------------


@operations.put(GROUP + "/retention", tags=["retention"], dependencies=[ADMIN], summary="Set the group's retention")
def put_group_retention(group_id: GroupId, body: RetentionPolicy, service: ServiceDep) -> StoredPolicy:
    """Messages older than `max_age_days` (by their own timestamps, or by arrival with `"by": "arrival"`)
    are erased by the next sweep, with what was made from them, as a delete erases them."""
    return service.set_retention(group_id, body)


@operations.get(GROUP + "/retention", tags=["retention"], dependencies=[READ], summary="The group's retention")
def get_retention(group_id: GroupId, service: ServiceDep) -> RetentionPolicies:
    return service.retention(group_id)


@operations.delete(
    GROUP + "/retention", tags=["retention"], dependencies=[ADMIN], summary="Clear the group's retention"
)
def clear_group_retention(group_id: GroupId, service: ServiceDep) -> Cleared:
    return Cleared(cleared=service.clear_retention(group_id))


@operations.put(
    SESSION + "/retention", tags=["retention"], dependencies=[ADMIN], summary="Set a session's own retention"
)
def put_session_retention(
    group_id: GroupId, session_id: SessionId, body: RetentionPolicy, service: ServiceDep
) -> StoredPolicy:
    """It replaces the group's policy for this session."""
    return service.set_retention(group_id, body, session_id=session_id)


@operations.delete(
    SESSION + "/retention", tags=["retention"], dependencies=[ADMIN], summary="Clear a session's own retention"
)
def clear_session_retention(group_id: GroupId, session_id: SessionId, service: ServiceDep) -> Cleared:
    return Cleared(cleared=service.clear_retention(group_id, session_id=session_id))


@operations.post(GROUP + "/retention/sweep", tags=["retention"], summary="Sweep now (or preview with dry_run)")
def sweep(
    group_id: GroupId,
    service: ServiceDep,
    who: Annotated[Principal, ADMIN],
    dry_run: Annotated[bool, Query(description="list what would be erased, change nothing")] = False,
) -> RetentionReceipt:
    """Erases what the policies say is too old, now, with the guarantees of a delete (gone from every
    answer; on embedded Chroma, from the data folder before the answer); the receipt lists the ids and
    counts, and the audit trail records the sweep."""
    return service.sweep_retention(group_id, dry_run=dry_run, actor=who.actor)


# -- change events -------------------------------------------------------------------------------------


@operations.post(
    "/webhooks", tags=["webhooks"], status_code=201, summary="Subscribe a URL to the change events of groups"
)
def create_webhook(body: SubscriptionIn, service: ServiceDep, who: Annotated[Principal, SERVER_ADMIN]) -> WebhookOut:
    """Every change of the groups' memory is POSTed to `url` as JSON (ids, never content), signed in
    `X-Epimem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with secret>`. Loopback and
    private hosts are refused unless `EPIMEM_WEBHOOK_ALLOW_HOSTS` names them. The secret is never shown again."""
    return service.create_webhook(**body.model_dump(), actor=who.actor)


@operations.get("/webhooks", tags=["webhooks"], dependencies=[SERVER_ADMIN], summary="Webhook subscriptions")
def list_webhooks(service: ServiceDep) -> WebhooksOut:
    return WebhooksOut(webhooks=service.webhook_subscriptions())


@operations.delete(
    "/webhooks/{subscription_id}",
    tags=["webhooks"],
    dependencies=[SERVER_ADMIN],
    status_code=204,
    summary="Remove a subscription (and its undelivered events)",
)
def delete_webhook(subscription_id: SubscriptionId, service: ServiceDep) -> Response:
    service.delete_webhook(subscription_id)
    return Response(status_code=204)


@operations.get(
    "/webhooks/{subscription_id}/deliveries",
    tags=["webhooks"],
    dependencies=[SERVER_ADMIN],
    summary="The last delivery attempts of a subscription",
)
def deliveries(
    subscription_id: SubscriptionId,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> DeliveryLog:
    return service.webhook_deliveries(subscription_id, limit=limit)


# -- backups -------------------------------------------------------------------------------------------


@operations.get(
    "/backup",
    tags=["backups"],
    dependencies=[SERVER_ADMIN],
    response_class=FileResponse,
    responses={200: {"content": {BACKUP_TYPE: {"schema": {"type": "string", "format": "binary"}}}}},
    summary="A backup of the whole server (or one group), while it takes writes",
)
def backup(
    service: ServiceDep,
    group: GroupIdQuery = None,
) -> FileResponse:
    """One file (gzip JSON Lines, checksummed): each group read at one moment, with every change that
    returned before it and none that began after. Restore it with `POST /v1/restore` or `epimem restore`."""
    if group is not None and not service.group_exists(group):
        raise NotFoundError("group not found")
    handle, name = tempfile.mkstemp(prefix="epimem-backup-", suffix=".gz")
    os.close(handle)
    path = Path(name)
    try:
        service.backup(path, group_id=group)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return FileResponse(
        path,
        media_type=BACKUP_TYPE,
        filename="epimem.backup.gz",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@operations.post(
    "/restore",
    tags=["backups"],
    dependencies=[SERVER_ADMIN],
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "a backup file as GET /v1/backup wrote it (gzip bytes)",
            "content": {BACKUP_TYPE: {"schema": {"type": "string"}}},
        }
    },
    summary="Restore a backup into this server (which must hold none of its groups)",
)
async def restore(request: Request, service: ServiceDep, settings: SettingsDep) -> RestoreReceipt:
    """The body streams to a temporary file (up to `max_import_bytes`), which is checked whole (format,
    version, checksum, embedding model) before anything is written."""
    handle, name = tempfile.mkstemp(prefix="epimem-restore-", suffix=".gz")
    path = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            size = 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > settings.max_import_bytes:
                    raise PayloadTooLargeError(
                        f"a restore body is at most {settings.max_import_bytes} bytes (EPIMEM_MAX_IMPORT_BYTES)"
                    )
                out.write(chunk)
        receipt: RestoreReceipt = await run_in_threadpool(service.restore, path)
        return receipt
    finally:
        path.unlink(missing_ok=True)
