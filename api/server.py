"""The FastAPI app: ``create_app(service=None, settings=None)``.

The service is built in the lifespan from settings (or the one passed in, which the caller owns),
kept on ``app.state``; routes reach it through ``Annotated`` dependencies. Interrupted episode
formation is finished in the background at startup.

    uvicorn --factory api.server:create_app      # or: epimem serve
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from api.auth import KeyRing
from api.explorer.routes import explorer, mount_ui
from api.facade import Epimem
from api.http.access import AccessCollector, attach_access, start_access, stop_access
from api.http.corrections import corrections
from api.http.error_handling import install_error_handlers
from api.http.home import home
from api.http.keys import keys_router
from api.http.metrics import Metrics
from api.http.middleware import RequestMiddleware
from api.http.operations import operations
from api.http.probes import ops
from api.http.routes import v1
from api.http.telemetry import setup_tracing
from api.mcp.http import mount_mcp
from api.settings import Settings, load_settings
from memory.background import background_thread
from memory.errors import EpimemError

log = logging.getLogger("epimem.api")
RECOVERY_WAIT_AT_STOP_S = 2.0  # how long a stop waits for the startup recovery to finish

DOCS_ASSETS = "/docs-assets"  # Swagger UI's and ReDoc's scripts, styles and favicon
DESCRIPTION = """Episodic memory for LLM applications.

Messages go in per (group, session); they are stored durably at once and become titled,
third-person **episodes** off the request path (or on flush). Recall them by meaning, keyword
and time (`search`), as a cited prompt block (`context`), or in time order (`timeline`).

**Auth**: `Authorization: Bearer <key>` with keys scoped to groups (read / write / admin), or
no keys at all in local mode. **Errors** always have the shape
`{"error": {"code", "message", "details"}}`. Ids containing `/` cannot be addressed in a URL path.
"""


def _recover(app: FastAPI, service: Epimem) -> None:
    try:
        recovered = service.recover()
        if recovered:
            log.info("recovered %d episodes whose formation was interrupted", len(recovered))
    except EpimemError as error:
        log.warning("recovery at startup failed; the messages stay pending: %s", error.message)
    finally:
        app.state.recovering = False


def create_app(service: Epimem | None = None, settings: Settings | None = None) -> FastAPI:
    if settings is None:
        settings = service.settings if service is not None else load_settings()
    keys = KeyRing.from_file(settings.api_keys_file, store=settings.api_keys_store)  # fails fast on a bad file

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = service is None
        app.state.service = service if service is not None else Epimem.from_settings(settings)
        app.state.recovering = True
        if owned:
            app.state.service.embedder.load()  # a server loads its model before it listens
            attach_access(app, app.state.service)
        start_access(app)
        recovery = background_thread(_recover, args=(app, app.state.service), name="epimem-recovery")
        recovery.start()
        if not keys.enabled:
            log.info("local mode: no API keys configured, every request is allowed")
        try:
            yield
        finally:
            stop_access(app)
            recovery.join(timeout=RECOVERY_WAIT_AT_STOP_S)
            if recovery.is_alive() and owned:
                # Waiting would hold a stop for as long as the recovery takes (an LLM call per
                # episode). Nothing is lost: the messages are stored and an interrupted formation is
                # finished by the next start, as after a crash. The service is not closed under the
                # recovery's feet; the process exits, and with it the recovery and the folder lock.
                log.warning("stopping during the startup recovery: it resumes at the next start")
            elif owned:
                app.state.service.close()

    # /docs and /redoc from assets shipped in the fastapi-offline package (Swagger UI, ReDoc), not from a CDN:
    # they work with no network, like the rest of epimem.
    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
        title="epimem",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=[
            {"name": "messages", "description": "messages in, flush, history"},
            {"name": "episodes", "description": "episodes by id, expanded to their source messages"},
            {"name": "recall", "description": "search, context for prompts, timeline"},
            {"name": "groups", "description": "group configuration"},
            {"name": "sessions", "description": "session metadata"},
            {"name": "summaries", "description": "compaction of many episodes"},
            {"name": "export", "description": "a group as JSON Lines, and back"},
            {"name": "retention", "description": "how long a group keeps its messages; sweeps with receipts"},
            {"name": "webhooks", "description": "signed change events to subscribed URLs (admin of every group)"},
            {"name": "backups", "description": "the server (or a group) in one file while it serves, and back"},
            {"name": "operations", "description": "health, readiness, metrics"},
            {"name": "keys", "description": "API keys and their limits, managed live (an admin of every group)"},
        ],
    )
    app.state.settings = settings
    app.state.keys = keys
    app.state.service = service
    app.state.recovering = False
    app.state.metrics = Metrics(lambda: app.state.service)
    app.state.quotas = None
    if service is not None:
        attach_access(app, service)
    app.state.metrics.registry.register(AccessCollector(app))
    install_error_handlers(app)
    app.include_router(v1)
    app.include_router(corrections)
    app.include_router(keys_router)
    app.include_router(operations)  # retention, webhooks, backups
    app.include_router(home)  # GET /: where the docs and the explorer are
    app.include_router(ops)
    mount_mcp(app)  # /mcp: the MCP tools over streamable HTTP (with epimem-server[mcp])
    app.include_router(explorer)
    mount_ui(app)  # the browser explorer at /ui, on the same public /v1 API
    app.add_middleware(
        RequestMiddleware,
        metrics=app.state.metrics,
        max_body_bytes=settings.max_body_bytes,
        max_import_bytes=settings.max_import_bytes,
        keys=keys,
    )  # on every path (also /mcp and /ui): local-mode guards, content types, key before body
    setup_tracing(app)  # OpenTelemetry when OTEL_* asks for it (with epimem-server[otel])
    return app


def serve_app() -> FastAPI:
    """Factory for uvicorn worker processes (``epimem serve --workers N``): settings from the environment."""
    from api.logs import configure_logging

    configure_logging()
    return create_app()
