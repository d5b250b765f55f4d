"""The FastAPI application: one per process, built from settings."""

from __future__ import annotations

import importlib
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

import broker
from api.problems import install_problem_handlers, problem_response
from api.routes import ROUTER_MODULES
from broker.db.runtime import Database, open_database
from broker.jobs import CapacityCache
from broker.metrics import exposition
from broker.services import build_services
from broker.services.loop import ServiceRunner
from broker.settings import Settings, get_settings

log = logging.getLogger("archipelago.api")


def create_app(settings: Settings | None = None, database: Database | None = None, *,
               run_loops: bool | None = None) -> FastAPI:
    """Build the app; the database is migrated on start for the embedded SQLite default.

    `run_loops=False` serves the API alone: tests drive each loop service's `run_once()` themselves.
    """
    settings = settings or get_settings()
    run_loops = settings.run_loops if run_loops is None else run_loops

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        owned = database is None
        app.state.db = database or open_database(settings, upgrade=settings.is_sqlite)
        app.state.services = ServiceRunner(build_services(app.state.db, settings) if run_loops else [])
        app.state.services.start()
        try:
            yield
        finally:
            app.state.services.stop()
            if owned:
                app.state.db.dispose()

    app = FastAPI(title="Archipelago", version=broker.__version__, lifespan=lifespan,
                  description="Multi-cluster broker that places JobSets on the cluster and HyperNode "
                              "where they run best.")
    app.state.settings = settings
    app.state.capacity = CapacityCache()
    install_problem_handlers(app)

    @app.get("/healthz", tags=["health"], summary="The process is alive")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="The process can serve: its database answers",
             responses={503: {"description": "The database does not answer"}})
    def readyz(request: Request):
        try:
            with request.app.state.db.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:  # any driver failure means not ready
            log.warning("readiness check failed: %s", exc)
            return problem_response(503, "Not ready", "the database does not answer; see the server log")
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics(request: Request) -> PlainTextResponse:
        return PlainTextResponse(exposition(request.app.state.db.sessions), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/version", tags=["health"], summary="The broker's version")
    def version() -> dict[str, str]:
        return {"version": broker.__version__}

    for module in ROUTER_MODULES:
        app.include_router(importlib.import_module(f"api.routes.{module}").router)
    return app
