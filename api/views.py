"""ORM rows → response models (amounts humanised: "8" GPUs, "512Gi" memory)."""

from __future__ import annotations

from typing import Any, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.store import jobs as job_service
from broker.store.db.models import Event, Job, Placement, Queue, Tenant
from broker.store.tenancy import QueueStats
from clusters.rules.quantity import format_quantity

from api import schemas
from clusters.rules.dra import DEMAND_PREFIX


def humanised(amounts: Mapping[str, int] | None) -> dict[str, str]:
    """Amounts for people: a pod device demand's own resource (`clusters.rules.dra.DEMAND_PREFIX`, pods the engine
    counts by) is left out: its devices show as the quota resources they are mapped to."""
    return {resource: format_quantity(amount, resource) for resource, amount in sorted((amounts or {}).items())
            if not resource.startswith(DEMAND_PREFIX)}


def job_out(job: Job, tenant: str, queue: str, placed: list[tuple[str, str | None]],
            tenants_of: Mapping[int, int] | None = None) -> schemas.JobOut:
    """`tenants_of`: the tenant of each job its forecast waits for (`expected_words`); none: its forecast is left out."""
    clusters = list(dict.fromkeys(cluster for cluster, _ in placed))
    forecast = job.forecast if job.state == "Queued" and tenants_of is not None else None
    hypernodes = list(dict.fromkeys(hypernode for _, hypernode in placed if hypernode))
    return schemas.JobOut(
        id=job.id, name=job.name, namespace=job.namespace, tenant=tenant, queue=queue, state=job.state,
        priority_class=job.priority_class, priority=job.priority, placement_mode=job.placement_mode,
        reason=job.reason, clusters=clusters, hypernodes=hypernodes,
        restart_count=job.restart_count, submitted_at=job.submitted_at,
        admitted_at=job.admitted_at, started_at=job.started_at, finished_at=job.finished_at,
        cancel_requested=job.cancel_requested_at is not None,
        expected_start=(forecast or {}).get("start"), expected=expected_words(forecast, job.tenant_id, tenants_of or {}))


def jobs_out(session: Session, jobs: list[Job]) -> list[schemas.JobOut]:
    """Summaries of jobs, their tenant, queue, clusters and HyperNodes read in one query each."""
    tenant_ids, queue_ids = {j.tenant_id for j in jobs}, {j.queue_id for j in jobs}
    tenants = dict(session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(tenant_ids))).all())
    queues = dict(session.execute(select(Queue.id, Queue.name).where(Queue.id.in_(queue_ids))).all())
    clusters = job_service.clusters_of(session, [j.id for j in jobs])
    tenants_of = waited_for(session, [j.forecast for j in jobs if j.state == "Queued"])
    return [job_out(j, tenants[j.tenant_id], queues[j.queue_id], clusters.get(j.id, []), tenants_of) for j in jobs]


def waited_for(session: Session, forecasts: list[Mapping[str, Any] | None]) -> dict[int, int]:
    """The tenant of each job these forecasts wait for (`expected_words`)."""
    after = {int(i) for forecast in forecasts for i in (forecast or {}).get("after") or ()}
    return dict(session.execute(select(Job.id, Job.tenant_id).where(Job.id.in_(after))).all()) if after else {}


def placement_out(placement: Placement) -> schemas.PlacementOut:
    nodes = sorted({a["node"] for a in placement.assignments or []})
    return schemas.PlacementOut(
        id=placement.id, job_id=placement.job_id, part=placement.part, cluster=placement.cluster_name,
        hypernode=placement.hypernode, tier=placement.tier, state=placement.state,
        generation=placement.generation, nodes=nodes, resources=humanised(placement.resources),
        status=placement.status or {}, last_error=placement.last_error, overrides=placement.overrides or [],
        created_at=placement.created_at,
        started_at=placement.started_at, finished_at=placement.finished_at)


def event_out(event: Event) -> schemas.EventOut:
    return schemas.EventOut(id=event.id, time=event.time, kind=event.kind, object_id=event.object_id,
                            type=event.type, reason=event.reason, message=event.message)


def queue_out(queue: Queue, stats: QueueStats, fair_share: float, dominant_share: float,
              lent: Mapping[str, int]) -> schemas.QueueOut:
    return schemas.QueueOut(
        name=queue.name, tenant=queue.tenant.name, weight=queue.weight, priority=queue.priority,
        nominal_quota=humanised(queue.nominal_quota), borrowing_limit=None if queue.borrowing_limit is None
        else humanised(queue.borrowing_limit), preemption_policy=queue.preemption_policy,
        reclaim_within_cohort=queue.reclaim_within_cohort, default_runtime=queue.default_runtime,
        default=queue.is_default, usage=humanised(stats.usage), lent=humanised(lent), pending=stats.pending, running=stats.running,
        oldest_pending_at=stats.oldest_pending_at, next_expected_start=stats.next_expected_start,
        fair_share=round(fair_share, 4),
        dominant_share=round(dominant_share, 4))


def expected_words(forecast: Mapping[str, Any] | None, tenant_id: int, tenants_of: Mapping[int, int]) -> str | None:
    """What a waiting job's forecast says, in the words its tenant may read: a job of its own by id, another tenant's
    job as such (never its id)."""
    if not forecast:
        return None
    if forecast.get("never"):
        return "never, as the fleet is now: no cluster could take it even once every running job has ended"
    if forecast.get("later_than"):
        return f"not before {forecast['later_than']}"
    where = f"on {forecast['cluster']}" + (f", HyperNode {forecast['hypernode']}" if forecast.get("hypernode") else "")
    after = [int(job_id) for job_id in forecast.get("after") or ()]
    if not after:
        return f"at the next cycle, {where}"
    own = [f"job {job_id}" for job_id in after if tenants_of.get(job_id) == tenant_id]
    others = len(after) - len(own)
    if len(own) > 3:  # a few by name; a job waiting for a whole HyperNode may wait for dozens
        own, others = own[:3], others + len(own) - 3
        own.append(f"{others} more job{'s' if others > 1 else ''}")
    elif others:
        own.append("a job of another tenant" if others == 1 else f"{others} jobs of other tenants")
    listed = own[0] if len(own) == 1 else ", ".join(own[:-1]) + " and " + own[-1]
    return f"after {listed} {'ends' if len(after) == 1 else 'end'}, {where}"
