"""Jobs: submit a JobSet (JSON or YAML, one or a batch), follow it, cancel it; placements and events."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from api import schemas
from api.deps import CredentialsDep, DatabaseDep, PrincipalDep, SessionDep, SettingsDep, submitter_of
from api.problems import Problem
from api.schemas import problems
from api.views import event_out, expected_words, humanised, job_out, jobs_out, placement_out, waited_for
from broker.engine.jobset import JobSetError
from broker.engine.overrides import rules_for
from broker.store import jobs as job_service
from broker.store.cluster_overrides import cluster_labels, preview, stored_rules
from broker.store.db.models import Job, as_utc, utcnow
from broker.store.errors import Invalid, NotFound
from broker.store.retention import history_from
from broker.store.forecast import stored_forecast
from broker.store.inventory.devices import class_mappings
from broker.store.scheduling import RULE_WORDS, dry_run_manifest, engine_config, probe
from broker.store.tenancy import Principal, Submitter, submitter_named
from clusters.rules.documents import DocumentError, load_json, load_yaml_all
from clusters.rules.dra import TEMPLATE_KIND

router = APIRouter(prefix="/api/v1")

JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
JOBSET_BODY = {
    "requestBody": {
        "required": True,
        "description": "A JobSet (jobset.x-k8s.io/v1alpha2), a list of them, a `kind: List`, or a YAML "
                       "stream of several documents.",
        "content": {
            "application/json": {"schema": {"oneOf": [{"type": "object"}, {"type": "array",
                                                                              "items": {"type": "object"}}]}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


async def _read_body(request: Request) -> bytes:
    """The raw body, read on the event loop (its sender trusted and its size bounded before: api/trust.py); the
    route decodes it in a worker thread."""
    return await request.body()


BodyDep = Annotated[bytes, Depends(_read_body)]


def decode_jobsets(content_type: str, body: bytes) -> tuple[list[Any], bool]:
    """The manifests in a body, and whether it was a batch."""
    media_type = content_type.split(";")[0].strip().lower()
    if media_type not in JSON_TYPES + YAML_TYPES:
        raise Problem(415, f"send the JobSet as application/json or application/yaml, not {media_type or 'nothing'}")
    try:
        documents = [load_json(body)] if media_type in JSON_TYPES else load_yaml_all(body)
    except DocumentError as exc:
        raise Problem(400, f"the body: {exc}") from None
    batch = len(documents) > 1
    if len(documents) == 1 and isinstance(documents[0], list):
        documents, batch = documents[0], True
    elif len(documents) == 1 and isinstance(documents[0], dict) and documents[0].get("kind") == "List":
        documents, batch = documents[0].get("items"), True
        if not isinstance(documents, list):
            raise Invalid("items", "a List needs `items`, a list of JobSets (and the ResourceClaimTemplates they name)")
    if not documents:
        raise Invalid("", "the body holds no JobSet")
    return documents, batch


def _submitting_tenant(session, principal: Principal, own: Submitter | None, tenant: str | None) -> Submitter:
    """The tenant a submission is for: an admin names it with ?tenant=, a tenant's token speaks for its own."""
    if principal.is_admin:
        if not tenant:
            raise Invalid("tenant", "an admin submits on behalf of a tenant: name it (?tenant=NAME; in the CLI, "
                                    "--tenant NAME)")
        return submitter_named(session, tenant)
    if tenant and tenant != principal.tenant_name:
        raise NotFound(f"tenant {tenant!r} does not exist")
    return own


@router.post("/jobs", tags=["jobs"], status_code=201, response_model=schemas.SubmitResult,
             openapi_extra=JOBSET_BODY, responses=problems(400, 401, 404, 409, 413, 415, 422),
             summary="Submit one JobSet or a batch")
def submit(request: Request, credentials: CredentialsDep, body: BodyDep,
           tenant: str | None = Query(None, description="the tenant to submit for (admins only)"),
           queue: str | None = Query(None, description="overrides the kueue.x-k8s.io/queue-name label")):
    # One trip through the thread pool (a session and a principal as dependencies would be three more; the database
    # and settings are taken from the app's state, as each dependency FastAPI solves costs a few percent of a POST)
    # and one transaction: who is asking, the validation and the write (on PostgreSQL a read transaction of its own
    # cost a checkout, its round trips and its rollback); the answer serialized here, as FastAPI would (validated
    # when built), not in a second trip.
    settings = request.app.state.settings
    # before the write lock, a first read taking a second; not for a request with no token (answered 401 below)
    capacity = request.app.state.capacity.get() if credentials is not None else None
    with request.app.state.db.write() as session:
        principal, own = submitter_of(session, settings, credentials, tenant)
        manifests, batch = decode_jobsets(request.headers.get("content-type", ""), body)
        owner = _submitting_tenant(session, principal, own, tenant)
        accepted = job_service.accept_jobs(owner, manifests, settings, capacity, queue_override=queue, batch=batch,
                                           mappings=lambda: class_mappings(session))
        submitted = job_service.store_jobs(session, owner, accepted, settings)
        request.app.state.services.jobs_queued(session)
    answer = schemas.SubmitResult(items=[job_out(job, owner.name, queue_name, []) for job, queue_name in submitted])
    return Response(answer.model_dump_json(by_alias=True), status_code=201, media_type="application/json")


@router.post("/jobs:dry-run", tags=["jobs"], response_model=schemas.DryRunOut, openapi_extra=JOBSET_BODY,
             responses=problems(400, 401, 404, 413, 415, 422), summary="Where would this JobSet go now, and why")
def dry_run(request: Request, session: SessionDep, credentials: CredentialsDep, body: BodyDep, settings: SettingsDep,
            tenant: str | None = Query(None, description="the tenant to ask for (admins only)"),
            queue: str | None = Query(None, description="overrides the kueue.x-k8s.io/queue-name label")):
    principal, own = submitter_of(session, settings, credentials, tenant)
    manifests, batch = decode_jobsets(request.headers.get("content-type", ""), body)
    if any(isinstance(m, dict) and m.get("kind") == TEMPLATE_KIND for m in manifests):
        raise Invalid("", "a dry run of a JobSet with ResourceClaimTemplates is not supported yet: submit it, and "
                          "`archipelago jobs get` says where it goes or why it waits")
    if batch:
        kinds = [str(m.get("kind")) if isinstance(m, dict) else type(m).__name__ for m in manifests]
        held = (f"none is a JobSet ({', '.join(sorted(set(kinds)))})" if "JobSet" not in kinds else
                "submit them without a dry run, or ask for one at a time")
        raise Invalid("", f"a dry run takes one JobSet; this body holds {len(manifests)} documents: {held}")
    owner = _submitting_tenant(session, principal, own, tenant)
    _, chosen, namespace, _, _ = job_service.validate_submission(owner, manifests[0], "", queue, settings,
                                                              request.app.state.capacity.get(session), engine_config(settings))
    manifest = job_service.with_queue_label(manifests[0], chosen.name)
    now = utcnow()
    try:
        with request.app.state.db.read() as snapshot_session:  # its own consistent read
            answer = dry_run_manifest(snapshot_session, manifest, owner.name, settings, now=now.timestamp(),
                                      as_tenant=not principal.is_admin)
            rules, labels = stored_rules(snapshot_session), cluster_labels(snapshot_session)
            also = None if answer.placements else probe(snapshot_session, manifest, owner.name, settings,
                                                         now.timestamp())
    except JobSetError as exc:
        raise Invalid(exc.path, exc.message) from None
    forecast = None
    if also is not None:  # when would it start: the fleet played forward with it submitted now
        played = request.app.state.fleet_forecast.play(request.app.state.db, now, also, wait=False)
        if played is not None and also[0].id in played.expected:
            forecast = stored_forecast(played.expected[also[0].id], played.runtimes.get(also[0].id), now)
    waiting = answer.waiting
    previews = [preview(rules, labels.get(p.cluster, {}), manifest, namespace=namespace, cluster=p.cluster,
                        part=p.part or "", pod_security=owner.pod_security) for p in answer.placements]
    return schemas.DryRunOut(
        fits=bool(answer.placements),
        placements=[schemas.DryRunPlacement(part=p.part or "", cluster=p.cluster, hypernode=p.hypernode, tier=p.tier,
                                            nodes=sorted(p.node_names()), overrides=list(seen.rules),
                                            manifest=seen.manifest, override_error=seen.error)
                    for p, seen in zip(answer.placements, previews)],
        preemptions=[schemas.DryRunPreemption(job=v.job_id or None, part=v.part or "", cluster=v.cluster, rule=v.rule,
                                              reason=RULE_WORDS[v.rule] if v.job_id else f"{v.message}: "
                                                                                         f"{RULE_WORDS[v.rule]}")
                     for v in answer.preemptions],
        clusters=[schemas.DryRunCluster(cluster=v.cluster, score=v.score, reason=v.reason or None,
                                        overrides=[r.name for r in rules_for(rules, v.cluster, labels.get(v.cluster, {}))])
                  for v in answer.clusters],
        reason=waiting.message if waiting else None,
        waiting_reasons=dict(waiting.clusters) if waiting else {},
        expected_start=(forecast or {}).get("start"),
        expected=expected_words(forecast, also[1].tenant_id, waited_for(session, [forecast])) if also else None)


@router.get("/jobs", tags=["jobs"], response_model=schemas.JobPage, responses=problems(401, 422))
def list_jobs(session: SessionDep, principal: PrincipalDep, settings: SettingsDep,
              tenant: str | None = None, queue: str | None = None,
              state: list[str] = Query([], description="one or more of Queued, Admitted, Dispatching, Starting, Running, "
                                                       "Succeeded, Failed, Cancelled"),
              cluster: str | None = None, name: str | None = None,
              selector: str | None = Query(None, description="label selector over the JobSet's labels"),
              limit: int = Query(100, ge=1, le=job_service.MAX_PAGE), cursor: str | None = None,
              order: Literal["newest", "oldest"] = Query("newest", description="by submission")):
    filters = job_service.JobFilter(tenant=tenant, queue=queue, states=state, cluster=cluster, name=name,
                                    selector=selector)
    page, next_cursor = job_service.list_jobs(session, principal, filters, limit, _cursor(cursor),
                                              oldest_first=order == "oldest")
    return schemas.JobPage(items=jobs_out(session, page),
                           next_cursor=str(next_cursor) if next_cursor is not None else None,
                           history_from=history_from(utcnow(), settings.retention_days))


def _cursor(value: str | None) -> int | None:
    if value is None:
        return None
    if not re.fullmatch(r"[0-9]{1,19}", value) or int(value) > schemas.MAX_ID:
        raise Invalid("cursor", "pass back the next_cursor of the previous page")
    return int(value)


def _since(value: datetime | None) -> datetime | None:
    """The time in UTC, which every database compares; a time with no UTC equivalent is a 422."""
    try:
        return as_utc(value).astimezone(timezone.utc) if value is not None else None
    except OverflowError:
        raise Invalid("since", f"{value.isoformat()} has no UTC equivalent; pass a time within years 1 to 9999 "
                               "in UTC") from None


def _job_detail(session, job: Job) -> schemas.JobDetail:
    summary = jobs_out(session, [job])[0]
    return schemas.JobDetail(**summary.model_dump(), position=job_service.queue_position(session, job),
                             forecast=job.forecast if job.state == "Queued" else None,
                             manifest=job.manifest, demand=humanised(job.demand),
                             waiting_reasons=job.waiting_reasons or {}, status=job.status or {},
                             placements=[placement_out(p) for p in job.placements],
                             events=[event_out(e) for e in job_service.job_events(session, job.id)])


@router.get("/jobs:counts", tags=["jobs"], response_model=dict[str, int], responses=problems(401),
            summary="How many jobs are in each state (of one queue)")
def count_jobs(session: SessionDep, principal: PrincipalDep, queue: str | None = None):
    return job_service.count_by_state(session, principal, queue)


@router.get("/jobs/{job_id}", tags=["jobs"], response_model=schemas.JobDetail, responses=problems(401, 404))
def get_job(job_id: schemas.ObjectId, session: SessionDep, principal: PrincipalDep):
    return _job_detail(session, job_service.get_job(session, principal, job_id))


@router.delete("/jobs/{job_id}", tags=["jobs"], status_code=202, response_model=schemas.JobOut,
               responses=problems(401, 404, 409), summary="Cancel: remove the job from every member")
def cancel_job(job_id: schemas.ObjectId, request: Request, database: DatabaseDep, principal: PrincipalDep):
    with database.write() as session:
        job = job_service.request_cancel(session, principal, job_id)
        answer = jobs_out(session, [job])[0]
    request.app.state.services.wake("dispatcher")
    return answer


@router.get("/placements", tags=["placements"], response_model=schemas.PlacementPage, responses=problems(401, 422))
def list_placements(session: SessionDep, principal: PrincipalDep, cluster: str | None = None,
                    state: list[str] = Query([]), job: int | None = Query(None, ge=1, le=schemas.MAX_ID),
                    limit: int = Query(100, ge=1, le=job_service.MAX_PAGE), cursor: str | None = None):
    rows = job_service.list_placements(session, principal, cluster, state, job, limit, _cursor(cursor))
    next_cursor = str(rows[-1][0].id) if len(rows) == limit else None
    return schemas.PlacementPage(items=[placement_out(p) for p, _ in rows], next_cursor=next_cursor)


@router.get("/events", tags=["events"], response_model=schemas.EventPage, responses=problems(401, 422))
def list_events(session: SessionDep, principal: PrincipalDep, settings: SettingsDep,
                kind: str | None = Query(None, description="cluster, job, queue, tenant or placement"),
                object: str | None = Query(None, description="the object's name or id"),
                since: datetime | None = None, limit: int = Query(100, ge=1, le=job_service.MAX_PAGE),
                cursor: str | None = None):
    rows = job_service.list_events(session, principal, kind, object, _since(since), limit, _cursor(cursor))
    return schemas.EventPage(items=[event_out(e) for e in rows],
                             next_cursor=str(rows[-1].id) if rows else cursor,
                             history_from=history_from(utcnow(), settings.retention_days))
