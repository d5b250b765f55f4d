"""The FastAPI application: one per process, built from settings."""

from __future__ import annotations

import importlib
import logging
import secrets
import time
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.staticfiles import StaticFiles
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from swagger_ui_bundle import swagger_ui_path

import broker
from api.audit import AuditTrail
from api.deps import SessionDep, SettingsDep, bearer, get_principal
from api.kube.routes import router as kube_router
from api.problems import Problem, install_problem_handlers, problem_response
from api.routes import ROUTER_MODULES
from api.schemas import problems
from api.trust import TrustedBodies
from broker.process.courtesy import REQUESTS_FIRST, RequestsFirst
from broker.process.logs import configure_logging
from broker.process.metrics import API_REQUEST_SECONDS, exposition
from broker.process.settings import Settings, get_settings
from broker.services import replica, serving_heap
from broker.store.capacity import CapacityCache
from broker.store.fleet_forecast import FleetForecast
from broker.store.db.runtime import Database, open_database

log = logging.getLogger("archipelago.api")


# Every answer: no MIME sniffing, no framing. Dashboard pages also: only their own scripts and styles
# (inline style attributes are how bars are sized), nothing sent elsewhere. /docs keeps Swagger UI's own needs
# (an inline script that starts it), its files served from the installed swagger-ui-bundle, never a CDN.
_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin")]
_PAGE_CSP = (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                         b"img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                                         b"frame-ancestors 'none'; form-action 'self'")


class SecurityHeaders:
    """Pure ASGI (no per-request task, unlike BaseHTTPMiddleware): adds the headers as the answer starts."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        page = not scope["path"].startswith("/docs")

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", [])) + _HEADERS
                if page and any(k == b"content-type" and v.startswith(b"text/html") for k, v in headers):
                    headers.append(_PAGE_CSP)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class ApiLatency:
    """Pure ASGI: each request's time to its answer's start, by method, route template and status class
    (`archipelago_api_request_seconds`); a watch's stream is not timed past its start."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()

        async def timed(message) -> None:
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                API_REQUEST_SECONDS.labels(scope["method"], route, f"{message['status'] // 100}xx").observe(
                    time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, timed)


class RequestsInFlight:
    """Pure ASGI: a request counts as in flight for the loops in this process (`broker.process.courtesy`) from its arrival, or
    once its body is in, until its answer starts. A body trickled in, or a watch streaming, does not count."""

    def __init__(self, app, requests: RequestsFirst = REQUESTS_FIRST) -> None:
        self.app, self.requests = app, requests

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        counted = answered = False

        def count() -> None:
            nonlocal counted
            if not counted and not answered:
                counted = True
                self.requests.started()

        def uncount() -> None:
            nonlocal counted, answered
            answered = True
            if counted:
                counted = False
                self.requests.answered()

        async def body_in() -> dict:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                count()
            return message

        async def answering(message) -> None:
            if message["type"] == "http.response.start":
                uncount()
            await send(message)

        if not any(name in (b"content-length", b"transfer-encoding") and value != b"0"
                   for name, value in scope["headers"]):
            count()
        try:
            await self.app(scope, body_in, answering)
        finally:
            uncount()


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
        await anyio.to_thread.run_sync(app.state.capacity.warm)
        app.state.services = replica(app.state.db, settings, run_loops=run_loops)
        app.state.services.start()
        try:
            yield
        finally:
            app.state.services.stop()
            if owned:
                app.state.db.dispose()

    app = FastAPI(title="Archipelago", version=broker.__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Multi-cluster broker that places JobSets on the cluster and HyperNode "
                              "where they run best.")
    app.add_middleware(TrustedBodies)  # the first added is the innermost: what is counted in flight is trusted
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RequestsInFlight)
    app.add_middleware(ApiLatency)
    app.add_middleware(AuditTrail)  # outermost: a request refused at the door is recorded too
    app.state.settings = settings
    app.state.capacity = CapacityCache(lambda: app.state.db.read())
    app.state.fleet_forecast = FleetForecast(settings)  # a dry run's "would start about 14:20"
    install_problem_handlers(app)

    app.mount("/docs/static", StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url, title="Archipelago API",
                                   swagger_js_url="/docs/static/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/static/swagger-ui.css",
                                   swagger_favicon_url="/docs/static/favicon-32x32.png")

    @app.get("/healthz", tags=["health"], summary="The process is alive")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="The process can serve: its database answers",
             responses={503: {"description": "The database does not answer"}})
    def readyz(request: Request):
        try:
            with request.app.state.db.read() as session:
                session.execute(text("SELECT 1"))
        except Exception as exc:  # any driver failure means not ready
            log.warning("readiness check failed: %s", exc)
            return problem_response(503, "Not ready", "the database does not answer; see the server log")
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics (the metrics token or an admin token)",
             response_class=PlainTextResponse, responses=problems(401, 403))
    def metrics(request: Request, session: SessionDep, settings: SettingsDep,
                credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> PlainTextResponse:
        token = settings.metrics_token
        if not (token and credentials and secrets.compare_digest(credentials.credentials.encode(), token.encode())):
            if not get_principal(request, session, settings, credentials).is_admin:
                raise Problem(403, "metrics need the metrics token (ARCHIPELAGO_METRICS_TOKEN) or an admin token",
                              title="Forbidden")
        return PlainTextResponse(exposition(request.app.state.db.read, queue_names=settings.metrics_queue_names),
                                 media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/version", tags=["health"], summary="The broker's version")
    def version() -> dict[str, str]:
        return {"version": broker.__version__}

    for module in ROUTER_MODULES:
        app.include_router(importlib.import_module(f"api.routes.{module}").router)
    app.include_router(kube_router)  # /k8s: the Kubernetes API front door
    return app


def api_worker_app() -> FastAPI:
    """One of `archipelago serve --workers N`'s API processes: its own logging, no loops (the parent runs them)."""
    settings = get_settings()
    configure_logging(settings)
    app = create_app(settings, run_loops=False)
    serving_heap()
    return app
