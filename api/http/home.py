"""``GET /``: where to go from the root of a running server (the API docs, the explorer)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

home = APIRouter()


class Home(BaseModel):
    service: str
    docs: str
    openapi: str
    explorer: str | None
    health: str


@home.get("/", summary="Where to go: the API docs and the explorer", tags=["operations"])
def root(request: Request) -> Home:
    paths = {getattr(route, "path", "") for route in request.app.routes}
    explorer = "/ui" if any(p == "/ui" or p.startswith("/ui/") for p in paths) else None
    return Home(service="epimem", docs="/docs", openapi="/openapi.json", explorer=explorer, health="/readyz")
