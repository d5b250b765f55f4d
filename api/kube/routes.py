"""The Kubernetes API front door under /k8s: discovery, OpenAPI v3 and namespaced JobSets.

Another face on the job service (broker.store.jobs), as the REST API is: submissions go through accept_jobs and
store_jobs, deletes through request_removal, listings through list_jobs. A tenant's token sees its own
namespaces; an admin's, every namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from typing import Any, Callable

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from sqlalchemy import select
from sqlalchemy.orm import Session, defer
from starlette.concurrency import run_in_threadpool

from api.deps import SessionDep, SettingsDep
from api.kube import resource
from api.kube.apply import check_apply, unchanged
from api.kube.caller import Caller, CallerDep
from api.kube.errors import KubeError, from_broker, not_found
from api.kube.objects import STATUS_ANNOTATIONS, core_event, render, table, uid_of, watermark
from api.kube.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from api.kube.watch import EventCursor, Scope, bookmark, changes, watch_slot
from api.problems import Problem
from api.routes.jobs import BodyDep, decode_jobsets
from broker.store import jobs as job_service
from broker.store.db.models import Event, Job, Tenant
from broker.store.errors import Conflict, Invalid, NotFound
from broker.store.tenancy import Principal, Submitter, submitter_named
from clusters.rules.documents import DocumentError, load_json, load_yaml_all
from clusters.rules.labels import parse_selector
from clusters.rules.patches import merge_patch, strategic_merge_patch

PREFIX = "/k8s"
SERVER_SET = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "managedFields",
              "selfLink")
WATCH_TIMEOUT = 1800.0
WATCH_POLL = 0.5
BOOKMARK_INTERVAL = 10.0
_TABLE = "as=Table"


class KubeRoute(APIRoute):
    """Every error of a front-door route, the broker's included, answered as a Status."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def answered_with_status(request: Request) -> Response:
            name = request.path_params.get("name")
            try:
                return await handler(request)
            except KubeError as exc:
                return exc.response()
            except (Invalid, NotFound, Conflict, Problem) as exc:
                return from_broker(exc, name).response()
            except RequestValidationError as exc:
                return KubeError(400, "; ".join(str(e.get("msg")) for e in exc.errors())).response()

        return answered_with_status


router = APIRouter(prefix=PREFIX, route_class=KubeRoute, include_in_schema=False)



# Discovery and OpenAPI ---------------------------------------------------------------------------

def _discovery(request: Request, legacy: dict[str, Any], core: bool) -> JSONResponse:
    if resource.wants_aggregated(request.headers.get("accept", "")):
        return JSONResponse(resource.aggregated(core), media_type=resource.AGGREGATED,
                            headers={"content-type": resource.AGGREGATED})
    return JSONResponse(legacy)


@router.get("/version")
def version(_: CallerDep) -> dict[str, str]:
    return resource.version_info()


@router.get("/api")
def core_api(request: Request, _: CallerDep) -> JSONResponse:
    return _discovery(request, resource.api_versions(), core=True)


@router.get("/apis")
def apis(request: Request, _: CallerDep) -> JSONResponse:
    return _discovery(request, resource.group_list(), core=False)


@router.get("/api/v1")
def core_resources(_: CallerDep) -> dict[str, Any]:
    return resource.core_resource_list()


def _tenant_namespaces(session: Session, caller: Caller) -> dict[str, str]:
    """namespace → tenant, of the namespaces the caller may use."""
    tenants = session.scalars(select(Tenant).order_by(Tenant.name))
    return {ns: tenant.name for tenant in tenants for ns in tenant.namespaces
            if caller.namespaces is None or ns in caller.namespaces}


@router.get("/api/v1/namespaces")
def list_namespaces(session: SessionDep, caller: CallerDep) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "NamespaceList", "metadata": {"resourceVersion": ""},
            "items": [resource.namespace(ns, tenant) for ns, tenant in _tenant_namespaces(session, caller).items()]}


@router.get("/api/v1/namespaces/{name}")
def get_namespace(name: str, session: SessionDep, caller: CallerDep) -> dict[str, Any]:
    if caller.namespaces is not None and name not in caller.namespaces:
        raise KubeError(403, f'namespaces "{name}" is forbidden: User "{caller.user}" cannot get resource '
                             f'"namespaces" in API group "" in the namespace "{name}"', group="", kind="namespaces")
    owners = _tenant_namespaces(session, caller)
    if name not in owners:
        raise KubeError(404, f'namespaces "{name}" not found', name=name, group="", kind="namespaces")
    return resource.namespace(name, owners[name])


@router.get("/api/v1/namespaces/{namespace}/events")
def list_events(namespace: str, request: Request, session: SessionDep, caller: CallerDep) -> dict[str, Any]:
    """The broker's events of the JobSets shown in a namespace, oldest first (`kubectl describe` names one)."""
    caller.scope("list", namespace)
    wanted = dict(term.split("=", 1) for term in (request.query_params.get("fieldSelector") or "").split(",")
                  if term.startswith("involvedObject.") and "=" in term)
    query = select(Job).where(Job.namespace == namespace, job_service.SHOWN_AS_JOBSETS)
    if "involvedObject.name" in wanted:
        query = query.where(Job.name == wanted["involvedObject.name"])
    jobs = {job.id: job for job in session.scalars(query.options(defer(Job.manifest)).limit(job_service.MAX_PAGE))
            if caller.principal.may_see(job.tenant_id) and wanted.get("involvedObject.kind", KIND) == KIND
            and wanted.get("involvedObject.uid", uid_of(job.id)) == uid_of(job.id)}
    events = session.scalars(select(Event).where(Event.kind == "job", Event.object_id.in_([str(i) for i in jobs]))
                             .order_by(Event.id.desc()).limit(job_service.MAX_PAGE)) if jobs else []
    return {"apiVersion": "v1", "kind": "EventList", "metadata": {"resourceVersion": ""},
            "items": [core_event(event, jobs[int(event.object_id)]) for event in reversed(list(events))]}


@router.get(f"/apis/{GROUP}")
def api_group(_: CallerDep) -> dict[str, Any]:
    return resource.group()


@router.get(f"/apis/{GROUP}/{VERSION}")
def api_resources(_: CallerDep) -> dict[str, Any]:
    return resource.resource_list()


@router.get("/openapi/v3")
def openapi_index(request: Request, settings: SettingsDep, _: CallerDep) -> dict[str, Any]:
    # client-go requests serverRelativeURL as the whole path: it carries the front door's prefix.
    url = f"{request.scope.get('root_path', '')}{PREFIX}/openapi/v3/{resource.GROUP_VERSION_PATH}"
    return {"paths": {resource.GROUP_VERSION_PATH: {
        "serverRelativeURL": f"{url}?hash={resource.group_version_hash(settings.jobset_crd)}"}}}


@router.get(f"/openapi/v3/apis/{GROUP}/{VERSION}")
def openapi_group_version(settings: SettingsDep, _: CallerDep) -> Response:
    return Response(json.dumps(resource.group_version_document(settings.jobset_crd)), media_type="application/json",
                    headers={"cache-control": "public, immutable"})


# Reading -----------------------------------------------------------------------------------------

_FIELDS = {"metadata.name": lambda obj: obj["metadata"]["name"],
           "metadata.namespace": lambda obj: obj["metadata"]["namespace"]}


def _matcher(label_selector: str | None, field_selector: str | None) -> tuple[Callable[[dict], bool], str | None]:
    """The selectors as one predicate over a JobSet, and the name a field selector pins (for the query)."""
    try:
        labels = parse_selector(label_selector) if label_selector else None
    except ValueError as exc:
        raise KubeError(400, f"unable to parse requirement: {exc}") from None
    fields: list[tuple[Callable, str, bool]] = []
    pinned = None
    for term in filter(None, (field_selector or "").split(",")):
        negated = "!=" in term
        key, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        if key.strip() not in _FIELDS:
            raise KubeError(400, f'"{key.strip()}" is not a known field selector: only "metadata.name", '
                                 '"metadata.namespace"')
        fields.append((_FIELDS[key.strip()], value.strip(), negated))
        if key.strip() == "metadata.name" and not negated:
            pinned = value.strip()

    def matches(obj: dict) -> bool:
        return ((labels is None or labels.matches(obj["metadata"].get("labels") or {}))
                and all((read(obj) == value) != negated for read, value, negated in fields))

    return matches, pinned


def _shown(session: Session, caller: Caller, namespace: str, name: str) -> Job | None:
    """The job shown under this namespace/name: the newest of that name not cancelled or removed."""
    job = session.scalar(select(Job).where(Job.namespace == namespace, Job.name == name,
                                           job_service.SHOWN_AS_JOBSETS).order_by(Job.id.desc()).limit(1))
    return job if job is not None and caller.principal.may_see(job.tenant_id) else None


def _find(session: Session, caller: Caller, namespace: str, name: str) -> Job:
    job = _shown(session, caller, namespace, name)
    if job is None:
        raise not_found(name)
    return job


def _answer(request: Request, objects: list[dict], list_meta: dict | None = None) -> dict[str, Any]:
    """One object, or a list, as JSON or as the Table kubectl asks for."""
    if _TABLE in request.headers.get("accept", ""):
        return table(objects, list_meta or {"resourceVersion": objects[0]["metadata"]["resourceVersion"]})
    if list_meta is None:
        return objects[0]
    return {"apiVersion": API_VERSION, "kind": f"{KIND}List", "metadata": list_meta, "items": objects}


def _list(request: Request, session: Session, caller: Caller, namespace: str | None) -> Response:
    query = request.query_params
    namespaces = caller.scope("list", namespace)
    matches, pinned = _matcher(query.get("labelSelector"), query.get("fieldSelector"))
    if query.get("watch") in ("1", "true"):
        return _watch(request, caller, Scope(caller.principal, namespaces, matches))
    limit = _integer(query.get("limit") or "0", "limit")
    cursor = _integer(query["continue"], "continue") if query.get("continue") else None
    resource_version = watermark(session)  # before the rows: a watch from it sees every later change
    filters = job_service.JobFilter(namespaces=namespaces or [], selector=query.get("labelSelector"), name=pinned,
                                    shown_as_jobsets=True)
    if namespaces == []:
        return JSONResponse(_answer(request, [], {"resourceVersion": str(resource_version)}))
    jobs, cursor = _page(session, caller.principal, filters, limit, cursor)
    objects = [obj for obj in render(session, jobs) if matches(obj)]
    meta = {"resourceVersion": str(resource_version)}
    if cursor is not None:
        meta["continue"] = str(cursor)
    return JSONResponse(_answer(request, objects, meta))


def _page(session: Session, principal: Principal, filters: job_service.JobFilter, limit: int,
          cursor: int | None) -> tuple[list[Job], int | None]:
    """`limit` jobs after the cursor, oldest first, and the cursor of the next page; every one for limit 0."""
    jobs: list[Job] = []
    while True:
        page, cursor = job_service.list_jobs(session, principal, filters, limit or job_service.MAX_PAGE, cursor,
                                             oldest_first=True)
        jobs += page
        if limit or cursor is None:
            return jobs, cursor


def _integer(value: str, name: str) -> int:
    if not value.isdigit() or len(value) > 19:
        raise KubeError(400, f"{name} must be a non-negative integer, not {value!r}")
    return int(value)


@router.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}")
def list_everywhere(request: Request, session: SessionDep, caller: CallerDep) -> Response:
    return _list(request, session, caller, None)


@router.get(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}")
def list_in_namespace(namespace: str, request: Request, session: SessionDep, caller: CallerDep) -> Response:
    return _list(request, session, caller, namespace)


@router.get(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}/{{name}}")
@router.get(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}/{{name}}/status")
def get_jobset(namespace: str, name: str, request: Request, session: SessionDep, caller: CallerDep) -> JSONResponse:
    caller.scope("get", namespace)
    return JSONResponse(_answer(request, render(session, [_find(session, caller, namespace, name)])))


# Watching ----------------------------------------------------------------------------------------

def _watch(request: Request, caller: Caller, scope: Scope) -> StreamingResponse:
    """The watch, in a slot of the caller's token (`watch_slot`): given back as its stream ends (its client gone, its
    time up), or, for a stream that never started, once the response is dropped."""
    query = request.query_params
    since = query.get("resourceVersion") or ""
    from_start = since in ("", "0") or query.get("sendInitialEvents") in ("1", "true")
    floor = None if from_start else _integer(since, "resourceVersion")
    bookmarks = query.get("allowWatchBookmarks") in ("1", "true")
    timeout = min(float(_integer(query.get("timeoutSeconds") or "0", "timeoutSeconds") or WATCH_TIMEOUT),
                  WATCH_TIMEOUT)
    as_table = _TABLE in request.headers.get("accept", "")
    database = request.app.state.db

    def line(event_type: str, obj: dict) -> bytes:
        if as_table and event_type != "BOOKMARK":
            obj = table([obj], {"resourceVersion": obj["metadata"]["resourceVersion"]})
        return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"

    def initial() -> tuple[int, list[dict]]:
        with database.read() as session:
            start = watermark(session)
            if scope.namespaces == []:
                return start, []
            filters = job_service.JobFilter(namespaces=scope.namespaces or [], shown_as_jobsets=True)
            jobs, _ = _page(session, caller.principal, filters, 0, None)
            return start, [obj for obj in render(session, jobs) if scope.matches(obj)]

    def poll(cursor: EventCursor) -> list[tuple[str, dict]]:
        with database.read() as session:
            return changes(session, scope, cursor)

    def current_watermark() -> int:
        with database.read() as session:
            return watermark(session)

    async def stream():
        nonlocal floor
        try:
            deadline = time.monotonic() + timeout
            if floor is None:
                floor, objects = await run_in_threadpool(initial)
                if objects:
                    yield b"".join(line("ADDED", obj) for obj in objects)
                if bookmarks and query.get("sendInitialEvents") in ("1", "true"):
                    mark = bookmark(floor)
                    mark["object"]["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                    yield line("BOOKMARK", mark["object"])
            cursor = EventCursor(floor)
            next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
            while time.monotonic() < deadline and not await request.is_disconnected():
                found = await run_in_threadpool(poll, cursor)
                if found:
                    yield b"".join(line(event_type, obj) for event_type, obj in found)
                if bookmarks and time.monotonic() >= next_bookmark:
                    yield line("BOOKMARK", bookmark(await run_in_threadpool(current_watermark))["object"])
                    next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
                if not found:
                    await asyncio.sleep(WATCH_POLL)
        finally:
            give_back()

    give_back = watch_slot(request.headers.get("authorization", ""), request.app.state.settings.max_watches_per_token)
    response = StreamingResponse(stream(), media_type="application/json")
    weakref.finalize(response.body_iterator, give_back)
    return response


# Writing -----------------------------------------------------------------------------------------

def _owner(session: Session, caller: Caller, namespace: str) -> Submitter:
    """The tenant a JobSet in this namespace is submitted for: the caller's, or for an admin the namespace's."""
    caller.scope("create", namespace)
    if not caller.principal.is_admin:
        return submitter_named(session, caller.principal.tenant_name)
    for tenant in session.scalars(select(Tenant)):
        if namespace in tenant.namespaces:
            return submitter_named(session, tenant.name)
    raise KubeError(404, f'namespaces "{namespace}" not found', name=namespace, group="", kind="namespaces")


def _in_namespace(manifest: Any, namespace: str) -> dict[str, Any]:
    if not isinstance(manifest, dict):
        raise KubeError(400, "the body must be one JobSet object")
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
    if metadata.get("namespace") not in (None, namespace):
        raise KubeError(400, "the namespace of the provided object does not match the namespace sent on the request")
    kept = {key: value for key, value in metadata.items() if key not in SERVER_SET}  # e.g. from `get -o yaml`
    if isinstance(kept.get("annotations"), dict):
        kept["annotations"] = {k: v for k, v in kept["annotations"].items() if k not in STATUS_ANNOTATIONS}
    return {**{key: value for key, value in manifest.items() if key != "status"},
            "metadata": {**kept, "namespace": namespace}}


def _dry_run(request: Request) -> bool:
    """`dryRun=All`: answer as the write would, change nothing (kubectl --dry-run=server, GitOps diffs)."""
    values = request.query_params.getlist("dryRun")
    if any(value != "All" for value in values):
        raise KubeError(400, f"dryRun: unsupported value {values!r}; the one value is All")
    return bool(values)


def _create(request: Request, session: Session, caller: Caller, namespace: str, manifest: dict) -> JSONResponse:
    owner = _owner(session, caller, namespace)
    name = (manifest.get("metadata") or {}).get("name")
    if isinstance(name, str) and _shown(session, caller, namespace, name) is not None:
        raise KubeError(409, f'{PLURAL}.{GROUP} "{name}" already exists', reason="AlreadyExists", name=name)
    settings = request.app.state.settings
    try:
        accepted = job_service.accept_jobs(owner, [manifest], settings, request.app.state.capacity.get(session))
        if _dry_run(request):  # validated as a submission is; nothing stored
            return JSONResponse({**manifest, "apiVersion": API_VERSION, "kind": KIND, "status": {}}, status_code=201)
        with request.app.state.db.write() as written:
            (job, _), = job_service.store_jobs(written, owner, accepted, settings)
            request.app.state.services.jobs_queued(written)
            created = render(written, [written.get(Job, job.id)])[0]
    except (Invalid, Conflict) as exc:  # named as the body names the JobSet: a create has no name in its path
        raise from_broker(exc, name if isinstance(name, str) else None) from None
    return JSONResponse(created, status_code=201)


@router.post(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}")
def create_jobset(namespace: str, request: Request, session: SessionDep, caller: CallerDep,
                  body: BodyDep) -> JSONResponse:
    # kube-apiserver reads a body that names no media type as JSON, and client libraries rely on it
    manifests, batch = decode_jobsets(request.headers.get("content-type") or "application/json", body)
    if batch:
        raise KubeError(400, "send one JobSet per request")
    return _create(request, session, caller, namespace, _in_namespace(manifests[0], namespace))


_MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_APPLY_TYPE = "application/apply-patch+yaml"


@router.patch(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}/{{name}}")
def patch_jobset(namespace: str, name: str, request: Request, session: SessionDep, caller: CallerDep,
                 body: BodyDep) -> JSONResponse:
    """Server-side apply creates a JobSet or confirms it unchanged; a merge patch may change nothing either
    (kubectl apply sends one only when the file differs from what was applied)."""
    caller.scope("patch", namespace)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in _MERGE_TYPES + (_APPLY_TYPE,):
        raise KubeError(415, f"the body of the request was in an unknown format - accepted media types include: "
                             f"{', '.join(_MERGE_TYPES + (_APPLY_TYPE,))}")
    try:
        patch = load_json(body) if media_type != _APPLY_TYPE or body.lstrip().startswith(b"{") else \
            (load_yaml_all(body) or [None])[0]
    except DocumentError as exc:
        raise KubeError(400, f"the body: {exc}") from None
    if not isinstance(patch, dict):
        raise KubeError(400, "the patch must be an object")
    job = _shown(session, caller, namespace, name)
    if job is None:
        if media_type != _APPLY_TYPE:
            raise not_found(name)
        if (patch.get("metadata") or {}).get("name") not in (None, name):
            raise KubeError(400, "the name of the object does not match the name on the URL")
        return _create(request, session, caller, namespace,
                       _in_namespace(merge_patch(patch, {"metadata": {"name": name}}), namespace))
    current = render(session, [job])[0]
    if media_type == _APPLY_TYPE:
        check_apply(request, name, patch, job.manifest)
    else:
        unchanged(name, (strategic_merge_patch if media_type == _MERGE_TYPES[1] else merge_patch)(current, patch),
                   job.manifest)
    return JSONResponse(current)


@router.delete(f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}/{{name}}")
def delete_jobset(namespace: str, name: str, request: Request, session: SessionDep, caller: CallerDep,
                  body: BodyDep) -> JSONResponse:
    """Cancel: the JobSet is removed from every member, and is gone once it is."""
    caller.scope("delete", namespace)
    job = _find(session, caller, namespace, name)
    try:  # DeleteOptions, where kubectl says dryRun
        options = load_json(body) if body.strip() else {}
    except DocumentError as exc:
        raise KubeError(400, f"the body: {exc}") from None
    if _dry_run(request) or (isinstance(options, dict) and options.get("dryRun") == ["All"]):
        return JSONResponse(render(session, [job])[0])
    with request.app.state.db.write() as written:
        removed = render(written, [job_service.request_removal(written, caller.principal, job.id)])[0]
    request.app.state.services.wake("dispatcher")
    return JSONResponse(removed)


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def unknown(rest: str, request: Request, _: CallerDep) -> JSONResponse:
    known = request.url.path.startswith(f"{PREFIX}/apis/{GROUP}/{VERSION}/namespaces/")
    if known and request.method in ("PUT", "POST", "DELETE"):
        raise KubeError(405, f"{request.method} is not supported here: the front door creates, patches and deletes "
                             "single JobSets")
    raise KubeError(404, "the server could not find the requested resource")
