"""The routes of keys and limits: an admin of every group (``*``) makes, lists, rotates and revokes keys and
sets limits; a group's admin reads its group's use. A key's secret is in the answer that makes or rotates
it, and nowhere else (``api.access.live_keys`` keeps a salted hash)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from api.access.live_keys import LiveKeys
from api.access.quotas import Quotas
from api.auth import KeyRing
from api.http.error_handling import error_responses
from api.http.key_schemas import (
    KEY_ID_PATTERN,
    GroupLimitsIn,
    GroupUsageOut,
    KeyCreated,
    KeyIn,
    KeyLimitsIn,
    KeyOut,
    KeysOut,
    UsageOut,
    UsageRow,
)
from api.http.params import GroupId
from api.http.routes import ADMIN, GROUP, SERVER_ADMIN
from memory.errors import NotFoundError, StoreUnavailableError
from memory.store.keys import StoredKey

keys_router = APIRouter(prefix="/v1", tags=["keys"], responses=error_responses(401, 403, 404, 409, 415, 422, 429, 503))
KeyId = Annotated[
    str,
    Path(pattern=KEY_ID_PATTERN, description="a key's id (`key-` and 12 hex digits)", examples=["key-0123456789ab"]),
]
KEY = "/keys/{key_id}"


def _parts(request: Request) -> tuple[LiveKeys, Quotas]:
    keys: KeyRing = request.app.state.keys
    quotas: Quotas | None = getattr(request.app.state, "quotas", None)
    if keys.live is None or quotas is None:
        raise StoreUnavailableError("the key store is not open yet: the server is starting", retry_after=1)
    return keys.live, quotas


def _out(quotas: Quotas, key: StoredKey, usage: dict[str, int] | None = None) -> KeyOut:
    return KeyOut.of(key, quotas.key_limits(key.limits), usage if usage is not None else quotas.key_usage(key.id))


@keys_router.post(
    "/keys", status_code=201, dependencies=[SERVER_ADMIN], summary="Make an API key (its secret is shown this once)"
)
def create_key(body: KeyIn, request: Request) -> KeyCreated:
    """Works at once on this server, and on every server of the deployment within `EPIMEM_KEYS_RECHECK_S`."""
    live, quotas = _parts(request)
    key, secret = live.create(
        name=body.name,
        groups=body.groups,
        role=body.role,
        expires_at=body.expires_at,
        limits=body.limits.values() if body.limits else None,
    )
    out = _out(quotas, key, {"messages_today": 0})
    return KeyCreated(**out.model_dump(), key=secret)


@keys_router.get("/keys", dependencies=[SERVER_ADMIN], summary="Every key, without secrets, with limits and use")
def list_keys(request: Request) -> KeysOut:
    live, quotas = _parts(request)
    today = quotas.usage_today()  # keys only: no group's usage is wanted here
    keys = live.keys()
    return KeysOut(keys=[_out(quotas, k, {"messages_today": today.get(("key", k.id), 0)}) for k in keys])


@keys_router.get(KEY, dependencies=[SERVER_ADMIN], summary="One key, without its secret")
def get_key(key_id: KeyId, request: Request) -> KeyOut:
    live, quotas = _parts(request)
    found = {key.id: key for key in live.keys()}
    if key_id not in found:
        live.refresh()  # made on another server since the last recheck?
        found = {key.id: key for key in live.keys()}
    if key_id not in found:
        raise NotFoundError(f"no key with id {key_id!r}")
    return _out(quotas, found[key_id])


@keys_router.delete(KEY, dependencies=[SERVER_ADMIN], summary="Revoke a key (refused at once; kept, listed)")
def revoke_key(key_id: KeyId, request: Request) -> KeyOut:
    """Refused at once on this server, on every other within `EPIMEM_KEYS_RECHECK_S`. Revoking twice is a no-op."""
    live, quotas = _parts(request)
    return _out(quotas, live.revoke(key_id))


@keys_router.post(
    KEY + "/rotate", dependencies=[SERVER_ADMIN], summary="A new secret for a key; the old one is refused"
)
def rotate_key(key_id: KeyId, request: Request) -> KeyCreated:
    live, quotas = _parts(request)
    key, secret = live.rotate(key_id)
    return KeyCreated(**_out(quotas, key).model_dump(), key=secret)


@keys_router.put(
    KEY + "/limits", dependencies=[SERVER_ADMIN], summary="Replace a key's limits (an empty object: the defaults)"
)
def put_key_limits(key_id: KeyId, body: KeyLimitsIn, request: Request) -> KeyOut:
    live, quotas = _parts(request)
    return _out(quotas, live.set_limits(key_id, body.values()))


@keys_router.put(
    GROUP + "/limits",
    tags=["groups"],
    dependencies=[SERVER_ADMIN],
    summary="Replace a group's limits (an admin of every group; {}: the defaults)",
)
def put_group_limits(group_id: GroupId, body: GroupLimitsIn, request: Request) -> GroupUsageOut:
    live, quotas = _parts(request)
    own = live.set_group_limits(group_id, body.values())
    return GroupUsageOut(
        group_id=group_id,
        limits=own,
        effective_limits=quotas.group_limits(group_id),
        usage=quotas.group_usage(group_id),
    )


@keys_router.get(GROUP + "/usage", tags=["groups"], dependencies=[ADMIN], summary="A group's limits and use")
def group_usage(group_id: GroupId, request: Request) -> GroupUsageOut:
    live, quotas = _parts(request)
    return GroupUsageOut(
        group_id=group_id,
        limits=live.group_limits(group_id),
        effective_limits=quotas.group_limits(group_id),
        usage=quotas.group_usage(group_id),
    )


@keys_router.get("/usage", dependencies=[SERVER_ADMIN], summary="Messages added today by every key and group")
def usage(request: Request) -> UsageOut:
    """Groups by their ids: the counters know a group by its hash, matched here with the groups that exist."""
    _, quotas = _parts(request)
    today = quotas.usage_today(request.app.state.service.list_groups())
    rows = [
        UsageRow.model_validate({"kind": kind, "id": subject, "messages_today": n})
        for (kind, subject), n in sorted(today.items())
    ]
    return UsageOut(day=quotas.day(), rows=rows)
