"""Jobs: submission (validated before anything is stored), listing, details and cancellation."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import String, and_, bindparam, cast, exists, func, insert, literal, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, defer

from broker.engine.jobset import (CLUSTER_SELECTOR_ANNOTATION, HIGHEST_TIER_ANNOTATION, MAX_RESTARTS_ANNOTATION,
                                  ON_PREEMPTION_ANNOTATION, PLACEMENT_ANNOTATION, PRIORITY_CLASS_LABEL, QUEUE_LABEL,
                                  STARTUP_TIMEOUT_ANNOTATION, TOPOLOGY_MODE_ANNOTATION, JobSetError, JobSpec,
                                  on_control_planes, parse_jobset, placement_record)
from broker.engine.forecast import EXPECTED_RUNTIME_ANNOTATION, deadline, declared_runtime
from broker.engine.placement import Config
from broker.process.settings import Settings
from broker.store import events
from broker.store.capacity import FederationCapacity
from broker.store.claims import NO_CLAIMS, DeviceDemands, SentClaims
from broker.store.db.models import (JOB_FINISHED_STATES, JOB_STATES, PLACEMENT_ACTIVE_STATES, PLACEMENT_LIVE_STATES,
                                    Event, Job, Placement, Queue, Tenant, utcnow)
from broker.store.errors import Conflict, Invalid, NotFound
from broker.store.inventory.devices import register_shapes
from broker.store.scheduling import engine_config
from broker.store.tenancy import Principal, QueueChoice, Submitter
from clusters.rules.labels import parse_selector
from clusters.rules.pod_security import template_refusal

BROKER_PREFIX = "archipelago.io/"
TENANT_ANNOTATIONS = frozenset({PLACEMENT_ANNOTATION, CLUSTER_SELECTOR_ANNOTATION, TOPOLOGY_MODE_ANNOTATION,
                                HIGHEST_TIER_ANNOTATION, MAX_RESTARTS_ANNOTATION, STARTUP_TIMEOUT_ANNOTATION,
                                ON_PREEMPTION_ANNOTATION, EXPECTED_RUNTIME_ANNOTATION})
MAX_PAGE = 500


# Submission ------------------------------------------------------------------------------------

def _reserved_keys_check(manifest: Mapping[str, Any], where: str) -> None:
    metadata = manifest.get("metadata") or {}
    for key in metadata.get("labels") or {}:
        if key.lower().startswith(BROKER_PREFIX):  # as DNS names compare
            raise Invalid(f"{where}metadata.labels[{key!r}]", f"labels under {BROKER_PREFIX} are set by the broker; "
                                                              "remove it")
    for key in metadata.get("annotations") or {}:
        if key.lower().startswith(BROKER_PREFIX) and key not in TENANT_ANNOTATIONS:
            raise Invalid(f"{where}metadata.annotations[{key!r}]",
                          f"unknown broker annotation; the ones a JobSet may carry are "
                          f"{', '.join(sorted(TENANT_ANNOTATIONS))}")


def _bounded(manifest: Any, where: str, settings: Settings) -> None:
    """Refuse a JobSet too large to keep and dispatch at a bounded cost, before anything else reads it."""
    size = len(json.dumps(manifest, ensure_ascii=False, separators=(",", ":")).encode())
    if size > settings.max_jobset_bytes:
        raise Invalid(where.rstrip(".") or "$", f"the JobSet is {size} bytes as JSON; the limit is "
                                                f"{settings.max_jobset_bytes} (setting ARCHIPELAGO_MAX_JOBSET_BYTES): "
                                                "move data out of the manifest")
    spec = manifest.get("spec") if isinstance(manifest, Mapping) else None
    rjobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    if isinstance(rjobs, list) and len(rjobs) > settings.max_replicated_jobs:
        raise Invalid(f"{where}spec.replicatedJobs", f"a JobSet may have at most {settings.max_replicated_jobs} "
                                                     f"ReplicatedJobs, this one has {len(rjobs)} (setting "
                                                     "ARCHIPELAGO_MAX_REPLICATED_JOBS)")


def validate_submission(tenant: Submitter, manifest: Any, where: str, queue_override: str | None,
                        settings: Settings, capacity: FederationCapacity, config: Config,
                        claims: SentClaims = NO_CLAIMS) -> tuple[JobSpec, QueueChoice, str, int, DeviceDemands]:
    """Everything a submission must pass; returns its spec, queue, namespace, priority and device demands. `config` is
    `engine_config(settings)`, made once per request: a batch validates hundreds of JobSets with it. `claims`: the
    ResourceClaimTemplates sent with it (`broker.store.claims`)."""
    _bounded(manifest, where, settings)
    try:
        spec = parse_jobset(manifest)
    except JobSetError as exc:
        raise Invalid(f"{where}{exc.path}", exc.message) from None
    if spec.placement == "split" and len(spec.parts) > settings.max_split_parts:
        raise Invalid(f"{where}spec.replicatedJobs", f"a split job may have at most {settings.max_split_parts} "
                                                     f"parts, this one has {len(spec.parts)} (setting "
                                                     "ARCHIPELAGO_MAX_SPLIT_PARTS); merge parts or submit several jobs")
    _reserved_keys_check(manifest, where)
    try:
        declared_runtime(manifest)
    except ValueError as exc:
        raise Invalid(f"{where}metadata.annotations[{EXPECTED_RUNTIME_ANNOTATION!r}]", str(exc)) from None
    namespace = spec.namespace or (tenant.namespaces[0] if tenant.namespaces else None)
    if namespace is None or namespace not in tenant.namespaces:
        raise Invalid(f"{where}metadata.namespace",
                      f"tenant {tenant.name} may use namespaces {', '.join(tenant.namespaces) or '(none)'}, "
                      f"not {namespace!r}")
    refused = template_refusal(manifest, tenant.pod_security)
    if refused:
        raise Invalid(f"{where}{refused[0]}", f"{refused[1]} (tenant {tenant.name}'s Pod Security level is "
                                              f"{tenant.pod_security}; an admin may change it)")
    if tenant.pod_security == "privileged":
        spec = on_control_planes(spec)
    queue = _queue_for(tenant, queue_override or spec.queue, where)
    priority_class = spec.priority_class or settings.default_priority_class
    if priority_class not in settings.priority_classes:
        raise Invalid(f"{where}metadata.labels[{PRIORITY_CLASS_LABEL!r}]",
                      f"unknown priority class {priority_class!r}; use one of "
                      f"{', '.join(sorted(settings.priority_classes, key=settings.priority_classes.get))}")
    refusal = capacity.refusal(spec, config)
    if refusal:
        raise Invalid(f"{where}{refusal.path}", refusal.message, clusters=refusal.clusters)
    spec, devices = claims.apply(spec, manifest, where)  # after the refusal: a new demand is not counted anywhere yet
    return spec, queue, namespace, settings.priority_classes[priority_class], devices


def _queue_for(tenant: Submitter, name: str | None, where: str) -> QueueChoice:
    """The named queue if the tenant owns it, else its default; from `tenant.queues`, read with the tenant (one
    query for the request, however large the batch: broker.store.tenancy)."""
    if name is None:
        queue = next((q for q in tenant.queues if q.is_default), None)
        if queue is None:
            raise Invalid(f"{where}metadata.labels[{QUEUE_LABEL!r}]",
                          f"name a queue with this label; tenant {tenant.name} has no default queue")
        return queue
    queue = next((q for q in tenant.queues if q.name == name), None)
    if queue is None:
        raise Invalid(f"{where}metadata.labels[{QUEUE_LABEL!r}]",
                      f"queue {name!r} does not exist or is not open to tenant {tenant.name}")
    return queue


def with_queue_label(manifest: Mapping[str, Any], queue: str) -> dict[str, Any]:
    """A copy of the manifest naming this queue, the way a JobSet written for Kueue does."""
    metadata = dict(manifest.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), QUEUE_LABEL: queue}
    return {**manifest, "metadata": metadata}


def submit_jobs(session: Session, tenant: Submitter, manifests: list[Any], settings: Settings,
                capacity: FederationCapacity, *, queue_override: str | None = None,
                batch: bool = False) -> list[tuple[Job, str]]:
    """Validate every manifest, then store them all as Queued (a batch is all or nothing).

    Returns each job with the name of the queue it went to."""
    return store_jobs(session, tenant, accept_jobs(tenant, manifests, settings, capacity,
                                                   queue_override=queue_override, batch=batch), settings)


def accept_jobs(tenant: Submitter, manifests: list[Any], settings: Settings,
                capacity: FederationCapacity, *, queue_override: str | None = None, batch: bool = False,
                mappings: Callable[[], dict[str, list[str]]] = dict) -> list:
    """Every manifest validated (nothing read but the tenant's queues, and `mappings` — the device-class quota
    mappings — when ResourceClaimTemplates come with them), ready for `store_jobs`."""
    accepted, config = [], engine_config(settings)
    claims = SentClaims.of(manifests, batch, mappings)
    for index, manifest in enumerate(manifests):
        if index in claims.positions:
            continue
        where = f"[{index}]." if batch else ""
        spec, queue, namespace, priority, devices = validate_submission(tenant, manifest, where, queue_override,
                                                                        settings, capacity, config, claims)
        accepted.append((where, spec, queue, namespace, priority, manifest, devices))
    if not accepted:
        raise Invalid("", "the body holds ResourceClaimTemplates but no JobSet")
    claims.check_all_used(accepted)
    _refuse_names_twice_in_batch([(w, ns, spec.name) for w, spec, _, ns, _, _, _ in accepted])
    return accepted


# Two batches that hold some names in opposite orders each wait at the unique index for a name the other inserted:
# PostgreSQL aborts one with this SQLSTATE. The one aborted lost a race for a name, as on a duplicate key.
DEADLOCK_DETECTED = "40P01"
_INSERT_JOBS = insert(Job.__table__).returning(Job.id, sort_by_parameter_order=True)  # built once, as for queries
_INSERT_EVENTS = insert(Event.__table__)


def store_jobs(session: Session, tenant: Submitter, accepted: list, settings: Settings) -> list[tuple[Job, str]]:
    """Insert accepted jobs as Queued, with their events; the caller commits."""
    names = [(w, ns, spec.name) for w, spec, _, ns, _, _, _ in accepted]
    register_shapes(session, [demand for *_, devices in accepted for demand in devices.demands])
    now = utcnow()
    rows = [{"tenant_id": tenant.id, "queue_id": queue.id, "name": spec.name, "namespace": namespace,
             "manifest": manifest, "priority_class": spec.priority_class or settings.default_priority_class,
             "priority": priority, "placement_mode": spec.placement, "placement_spec": placement_record(spec),
             "demand": dict(spec.requests), "state": "Queued", "declared_runtime": declared_runtime(manifest),
             "runtime_bound": deadline(manifest),
             "waiting_reasons": {}, "status": {}, "restart_count": 0, "evictions": 0, "avoid": {}, "submitted_at": now,
             "claim_templates": devices.templates}
            for _, spec, queue, namespace, priority, manifest, devices in accepted]
    queues = [queue.name for _, _, queue, _, _, _, _ in accepted]
    # A live job of the same namespace/name trips the unique index; only then do we look for it, to name it. (Any
    # other integrity error here is a race too, the queue or tenant removed at the same moment: the retry says so.)
    try:
        ids = _insert_queued(session.connection(), rows, queues)
    except (IntegrityError, OperationalError) as exc:
        if isinstance(exc, OperationalError) and getattr(exc.orig, "sqlstate", None) != DEADLOCK_DETECTED:
            raise
        session.rollback()  # nothing was written before the jobs
        _refuse_live_names(session, names)
        raise Conflict("a job of the same namespace/name was submitted at the same moment; retry") from None
    return [(Job(id=job_id, **row), queue) for job_id, row, queue in zip(ids, rows, queues)]


def _queued_job_statement():
    """One job and its Queued event in one statement (PostgreSQL): the event inserted from the job's RETURNING.
    Built once, with a bind parameter per column, so that SQLAlchemy compiles it once and psycopg prepares it."""
    # every column a row sets: SQLAlchemy's own defaults are not filled in for an INSERT in a CTE beside another
    columns = ("tenant_id", "queue_id", "name", "namespace", "manifest", "priority_class", "priority",
               "placement_mode", "placement_spec", "demand", "state", "waiting_reasons", "status", "restart_count",
               "evictions", "avoid", "submitted_at", "declared_runtime", "runtime_bound", "claim_templates")
    job = (insert(Job.__table__).values({name: bindparam(name) for name in columns})
           .returning(Job.id, Job.tenant_id, Job.queue_id, Job.namespace, Job.name, Job.submitted_at).cte("job"))
    queued = insert(Event.__table__).from_select(
        ("time", "kind", "object_id", "tenant_id", "type", "reason", "message"),
        select(job.c.submitted_at, literal("job"), cast(job.c.id, String), job.c.tenant_id, literal("Normal"),
               literal("Queued"), job.c.namespace + "/" + job.c.name + " queued in " + Queue.name)
        .join(Queue, Queue.id == job.c.queue_id)).cte("queued")
    return select(job.c.id).add_cte(queued)


_INSERT_QUEUED_JOB = _queued_job_statement()


def _insert_queued(connection: Connection, rows: list[dict], queues: list[str]) -> list[int]:
    """Insert the jobs and their Queued events (each at its job's submission time); the jobs' ids, in the rows'
    order. A round trip to PostgreSQL costs a single POST about as much as its own work: there one job goes in one
    statement. Otherwise two Core inserts, one statement a table however large the batch (which the ORM's unit of
    work is not)."""
    if len(rows) == 1 and connection.dialect.name == "postgresql":
        return [connection.execute(_INSERT_QUEUED_JOB, rows[0]).scalar_one()]
    ids = connection.execute(_INSERT_JOBS, rows).scalars().all()
    connection.execute(_INSERT_EVENTS, [
        {"time": row["submitted_at"], "kind": "job", "object_id": str(job_id), "tenant_id": row["tenant_id"],
         "type": "Normal", "reason": "Queued", "message": f"{row['namespace']}/{row['name']} queued in {queue}"}
        for job_id, row, queue in zip(ids, rows, queues)])
    return ids


def _refuse_names_twice_in_batch(names: list[tuple[str, str, str]]) -> None:
    seen: set[tuple[str, str]] = set()
    for where, namespace, name in names:
        if (namespace, name) in seen:
            raise Conflict(f"{where}metadata.name: {namespace}/{name} appears twice in this batch")
        seen.add((namespace, name))


def _refuse_live_names(session: Session, names: list[tuple[str, str, str]]) -> None:
    """Name the live job that holds one of these namespace/names (they would collide on the member)."""
    wanted = {(namespace, name): where for where, namespace, name in names}
    candidates = session.execute(select(Job.id, Job.namespace, Job.name, Job.state).where(
        Job.namespace.in_({ns for ns, _ in wanted}), Job.name.in_({n for _, n in wanted}),
        Job.state.not_in(JOB_FINISHED_STATES)))
    for job_id, namespace, name, state in candidates:
        if (namespace, name) in wanted:
            raise Conflict(f"{wanted[(namespace, name)]}metadata.name: job {job_id} ({namespace}/{name}) is still "
                           f"{state}; pick another name or cancel it first")


# Reading ---------------------------------------------------------------------------------------

@dataclass
class JobFilter:
    tenant: str | None = None
    queue: str | None = None
    states: list[str] = field(default_factory=list)
    cluster: str | None = None
    name: str | None = None
    selector: str | None = None
    namespaces: list[str] = field(default_factory=list)
    shown_as_jobsets: bool = False  # only what the Kubernetes front door shows (see SHOWN_AS_JOBSETS)


# What the Kubernetes front door shows as JobSets: every job but the cancelled ones and the finished ones
# removed (request_removal); a cancel request is what deleted them, so a job asked to stop vanishes once stopped.
SHOWN_AS_JOBSETS = or_(Job.state.not_in(JOB_FINISHED_STATES), Job.cancel_requested_at.is_(None))


def _visible(principal: Principal):
    return True if principal.is_admin else Job.tenant_id == principal.tenant_id


def get_job(session: Session, principal: Principal, job_id: int) -> Job:
    """The job if the principal may see it; its manifest (up to max_jobset_bytes) is read only after that."""
    job = session.get(Job, job_id, options=[defer(Job.manifest)])
    if job is None or not principal.may_see(job.tenant_id):
        raise NotFound(f"job {job_id} does not exist")
    return job


def list_jobs(session: Session, principal: Principal, filters: JobFilter, limit: int = 100,
              cursor: int | None = None, oldest_first: bool = False) -> tuple[list[Job], int | None]:
    """Newest first (or oldest first); the cursor is the last id of the previous page. A label selector is
    applied in Python over id-ordered chunks, so pages stay exact and each page reads a bounded number of rows."""
    for state in filters.states:
        if state not in JOB_STATES:
            raise Invalid("state", f"unknown state {state!r}; one of {', '.join(JOB_STATES)}")
    try:
        selector = parse_selector(filters.selector) if filters.selector else None
    except ValueError as exc:
        raise Invalid("selector", str(exc)) from None
    limit = max(1, min(limit, MAX_PAGE))
    query = select(Job).where(_visible(principal))
    if selector is None:  # a page does not show manifests: read them only to match labels
        query = query.options(defer(Job.manifest))
    if filters.tenant:
        query = query.where(Job.tenant_id == select(Tenant.id).where(Tenant.name == filters.tenant).scalar_subquery())
    if filters.queue:
        query = query.where(Job.queue_id == select(Queue.id).where(Queue.name == filters.queue).scalar_subquery())
    if filters.states:
        query = query.where(Job.state.in_(filters.states))
    if filters.name:
        query = query.where(Job.name == filters.name)
    if filters.namespaces:
        query = query.where(Job.namespace.in_(filters.namespaces))
    if filters.shown_as_jobsets:
        query = query.where(SHOWN_AS_JOBSETS)
    if filters.cluster:
        query = query.where(exists().where(and_(Placement.job_id == Job.id,
                                                Placement.cluster_name == filters.cluster)))
    chunk_size = limit if selector is None else max(limit, 200)
    query = query.order_by(Job.id.asc() if oldest_first else Job.id.desc()).limit(chunk_size)
    page: list[Job] = []
    while True:
        after = query if cursor is None else query.where(Job.id > cursor if oldest_first else Job.id < cursor)
        chunk = list(session.scalars(after))
        for job in chunk:
            cursor = job.id
            if selector is None or selector.matches((job.manifest.get("metadata") or {}).get("labels") or {}):
                page.append(job)
                if len(page) == limit:
                    return page, cursor
        if len(chunk) < chunk_size:
            return page, None


def queue_position(session: Session, job: Job) -> int | None:
    """A queued job's place among its queue's waiting jobs (1: next), in the order the scheduler takes a queue's jobs:
    higher priority first, then the earlier submission. None for a job that does not wait."""
    if job.state != "Queued":
        return None
    ahead = or_(Job.priority > job.priority,
                and_(Job.priority == job.priority, or_(Job.submitted_at < job.submitted_at,
                                                       and_(Job.submitted_at == job.submitted_at, Job.id < job.id))))
    return 1 + session.scalar(select(func.count()).select_from(Job).where(
        Job.queue_id == job.queue_id, Job.state == "Queued", ahead))


def count_by_state(session: Session, principal: Principal, queue: str | None = None) -> dict[str, int]:
    """How many jobs the principal sees are in each state (of one queue, if named)."""
    counted = select(Job.state, func.count()).where(_visible(principal)).group_by(Job.state)
    if queue is not None:
        counted = counted.join(Queue, Queue.id == Job.queue_id).where(Queue.name == queue)
    found = dict(session.execute(counted).all())
    return {state: found.get(state, 0) for state in JOB_STATES}


def job_events(session: Session, job_id: int, limit: int = 200) -> list[Event]:
    return list(session.scalars(select(Event).where(Event.kind == "job", Event.object_id == str(job_id))
                                .order_by(Event.id.desc()).limit(limit)))[::-1]


def request_cancel(session: Session, principal: Principal, job_id: int) -> Job:
    """Queued jobs are cancelled at once; placed ones once every member copy is gone (propagation does that).

    Both writes are conditional, so a scheduler admitting the job at the same moment either sees the
    request (and leaves the job alone) or wins, and then the job is cancelled through its placements.
    """
    job = get_job(session, principal, job_id)
    if job.state in JOB_FINISHED_STATES:
        raise Conflict(f"job {job_id} is already {job.state}; there is nothing to cancel")
    now = utcnow()
    first_request = session.execute(update(Job).where(Job.id == job.id, Job.cancel_requested_at.is_(None),
                                                      Job.state.not_in(JOB_FINISHED_STATES))
                                    .values(cancel_requested_at=now)).rowcount == 1
    if not first_request:  # asked before, or finished since it was read (a status batch held it meanwhile)
        session.refresh(job)
        if job.state in JOB_FINISHED_STATES:
            raise Conflict(f"job {job_id} is already {job.state}; there is nothing to cancel")
    live = exists().where(Placement.job_id == Job.id, Placement.state.in_(PLACEMENT_LIVE_STATES))
    cancelled_now = session.execute(
        update(Job).where(Job.id == job.id, Job.state == "Queued", ~live)
        .values(state="Cancelled", finished_at=now, reason="cancelled before it was placed")).rowcount == 1
    if cancelled_now:
        events.record(session, "job", job.id, "Cancelled", "cancelled before it was placed", tenant_id=job.tenant_id)
    elif first_request:
        events.record(session, "job", job.id, "CancelRequested",
                      "cancel requested; removing the JobSet from every member", tenant_id=job.tenant_id)
    session.flush()
    session.refresh(job)
    return job


def request_removal(session: Session, principal: Principal, job_id: int) -> Job:
    """Delete as Kubernetes means it: a live job is cancelled (it is gone once every copy is); a finished one
    leaves the JobSets the front door shows at once, its row and events kept as the REST API's history."""
    job = get_job(session, principal, job_id)
    if job.state not in JOB_FINISHED_STATES:
        return request_cancel(session, principal, job_id)
    if session.execute(update(Job).where(Job.id == job.id, Job.cancel_requested_at.is_(None))
                       .values(cancel_requested_at=utcnow())).rowcount == 1:
        events.record(session, "job", job.id, "Removed", f"{job.state} job removed from the JobSets shown; kept "
                                                         "in the history", tenant_id=job.tenant_id)
    session.flush()
    session.refresh(job)
    return job


def clusters_of(session: Session, job_ids: list[int]) -> dict[int, list[tuple[str, str | None]]]:
    """The (cluster, HyperNode) pairs each job is placed on, or ended on, for listings: not those of placements
    being deleted (a job re-queued after a fail-over or an eviction is on no cluster while it waits)."""
    found: dict[int, list[tuple[str, str | None]]] = {}
    if not job_ids:
        return found
    rows = session.execute(select(Placement.job_id, Placement.cluster_name, Placement.hypernode)
                           .where(Placement.job_id.in_(job_ids), Placement.state.in_(PLACEMENT_ACTIVE_STATES + (
                               "Succeeded", "Failed"))).order_by(Placement.id))
    for job_id, cluster, hypernode in rows:
        if (cluster, hypernode) not in found.setdefault(job_id, []):
            found[job_id].append((cluster, hypernode))
    return found


def list_events(session: Session, principal: Principal, kind: str | None = None, object_id: str | None = None,
                since: datetime | None = None, limit: int = 100, cursor: int | None = None) -> list[Event]:
    """Oldest first after `cursor` (an event id) or `since`; tenants see only their own objects' events."""
    query = select(Event).order_by(Event.id).limit(max(1, min(limit, MAX_PAGE)))
    if not principal.is_admin:
        query = query.where(Event.tenant_id == principal.tenant_id)
    if kind:
        query = query.where(Event.kind == kind)
    if object_id:
        query = query.where(Event.object_id == object_id)
    if since:
        query = query.where(Event.time >= since)
    if cursor is not None:
        query = query.where(Event.id > cursor)
    return list(session.scalars(query))


def list_placements(session: Session, principal: Principal, cluster: str | None = None,
                    states: list[str] | None = None, job_id: int | None = None, limit: int = 100,
                    cursor: int | None = None) -> list[tuple[Placement, Job]]:
    query = select(Placement, Job).join(Job, Job.id == Placement.job_id).order_by(Placement.id.desc())
    query = query.where(_visible(principal)).limit(max(1, min(limit, MAX_PAGE)))
    if cluster:
        query = query.where(Placement.cluster_name == cluster)
    if states:
        query = query.where(Placement.state.in_(states))
    if job_id is not None:
        query = query.where(Placement.job_id == job_id)
    if cursor is not None:
        query = query.where(Placement.id < cursor)
    return list(session.execute(query))
