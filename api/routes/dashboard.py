"""The ops dashboard: server-rendered page shells whose plain JavaScript reads the REST API.

Every figure a page shows comes from `/api/v1` with the user's own bearer token (kept in the
browser's sessionStorage after the login page), so a tenant sees exactly what the API lets it see.
Two small read endpoints serve the dashboard alone: who the token speaks for, and queue history.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from api.deps import PrincipalDep, SessionDep
from api.identity import verifier_for
from api.problems import Problem
from api.schemas import problems
from broker.store import inventory, tenancy
from broker.store.db.models import utcnow
from broker.store.queue_history import queue_history, sample_times

HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=HERE / "templates")
STATIC = HERE / "static"
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}

router = APIRouter()

# (path, template, nav entry, title)
PAGES = [
    ("/", "overview.html", "overview", "Overview"),
    ("/clusters", "clusters.html", "clusters", "Clusters"),
    ("/queues", "queues.html", "queues", "Queues"),
    ("/jobs", "jobs.html", "jobs", "Jobs"),
]


def _page(template: str, nav: str, title: str):
    def render(request: Request) -> HTMLResponse:
        return templates.TemplateResponse(request, template, {"nav": nav, "title": title})
    return render


for _path, _template, _nav, _title in PAGES:
    router.add_api_route(_path, _page(_template, _nav, _title), methods=["GET"], response_class=HTMLResponse,
                         include_in_schema=False, name=f"dashboard_{_nav}")


@router.get("/login", response_class=HTMLResponse, include_in_schema=False)
def login_page(request: Request):
    sso = verifier_for(request.app.state.settings) is not None
    return templates.TemplateResponse(request, "login.html", {"nav": None, "title": "Sign in", "sso": sso})


@router.get("/clusters/{name}", response_class=HTMLResponse, include_in_schema=False)
def cluster_page(request: Request, name: str):
    return templates.TemplateResponse(request, "cluster.html", {"nav": "clusters", "title": f"Cluster {name}",
                                                                "name": name})


@router.get("/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
def job_page(request: Request, job_id: int):
    return templates.TemplateResponse(request, "job.html", {"nav": "jobs", "title": f"Job {job_id}",
                                                            "job_id": job_id})


@router.get("/static/{filename}", include_in_schema=False)
def static_file(filename: str):
    path = STATIC / filename
    if "/" in filename or path.suffix not in STATIC_TYPES or not path.is_file():
        raise Problem(404, f"no static file {filename!r}")
    return FileResponse(path, media_type=STATIC_TYPES[path.suffix], headers={"Cache-Control": "no-cache"})


@router.get("/api/v1/whoami", tags=["dashboard"], responses=problems(401),
            summary="Who the bearer token speaks for")
def whoami(principal: PrincipalDep) -> dict[str, str | None]:
    return {"role": principal.role, "tenant": principal.tenant_name}


@router.get("/api/v1/queue-history", tags=["dashboard"], responses=problems(401, 422),
            summary="Pending, running and dominant share of each visible queue over a recent window")
def queue_history_route(request: Request, session: SessionDep, principal: PrincipalDep,
                        minutes: int = Query(60, ge=1, le=24 * 60), points: int = Query(60, ge=2, le=240)):
    queues = [(q.id, q.name, q.tenant.name)
              for q in tenancy.list_queues(session, None if principal.is_admin else principal.tenant_id)]
    totals = request.app.state.capacity.get(session).totals
    window = timedelta(minutes=minutes)
    times = sample_times(utcnow(), window, window / points)
    history = queue_history(session, [q for q, _, _ in queues], totals, times)
    return {"times": [t.isoformat() for t in times],
            "queues": [{"tenant": tenant, "name": name, "pending": history[q].pending,
                        "running": history[q].running, "dominant_share": history[q].dominant_share}
                       for q, name, tenant in queues]}


@router.get("/api/v1/topology/{cluster}", tags=["dashboard"], responses=problems(401, 404),
            summary="A cluster's nodes and HyperNodes with allocatable, used and free capacity (milli-units)")
def topology(cluster: str, session: SessionDep, _: PrincipalDep):
    return inventory.topology_view(session, cluster)
