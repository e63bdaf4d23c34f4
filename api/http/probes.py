"""The server's own routes: liveness, readiness and its Prometheus metrics (not under /v1)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.http.error_handling import error_responses
from api.http.routes import SERVER_ADMIN, ServiceDep
from api.http.schemas import Health, Readiness
from memory.errors import StoreUnavailableError

ops = APIRouter(tags=["operations"])


@ops.get("/healthz", summary="Liveness")
def healthz() -> Health:
    return Health(status="ok")


@ops.get("/readyz", responses=error_responses(503), summary="Readiness: store reachable and model loaded")
def readyz(request: Request, service: ServiceDep) -> Readiness:
    service.heartbeat()
    model = service.embedder.model_id
    if not model:
        raise StoreUnavailableError("the embedding model is not loaded")
    return Readiness(status="ready", store="ok", model=model, recovering=bool(request.app.state.recovering))


@ops.get(
    "/metrics",
    dependencies=[SERVER_ADMIN],
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}, "description": "Prometheus"}},
    summary="Prometheus metrics of the whole server (an admin key for every group, '*', when keys are configured)",
)
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
