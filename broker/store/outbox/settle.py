"""The job from its placements: `settle_job` brings a job in line with its placements after any change to them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.status import Aggregate, PartView, Policy, aggregate
from broker.store import events
from broker.store.db.models import JOB_FINISHED_STATES, PLACEMENT_LIVE_STATES, Job, Placement
from broker.store.outbox.locks import LOCKED, lock_job
from broker.store.outbox.work import DISPATCHING_JOB_STATES, PLACED_JOB_STATES, VERDICT_STATES, Changes


def part_where(placement: Placement) -> str:
    """`shard-a on eu-west`, or `on eu-west` for a whole JobSet."""
    return f"{placement.part + ' ' if placement.part else ''}on {placement.cluster_name}"


def settle_job(session: Session, job_id: int, now: datetime) -> Changes:
    """Bring the job in line with its placements (call after any placement change)."""
    job = lock_job(session, job_id)
    if job is None:
        return Changes()
    locked = session.info.get(LOCKED)
    if locked is not None and job_id in locked.jobs:
        placements = list(locked.by_job.get(job_id, ()))
    else:
        placements = list(session.scalars(select(Placement).where(Placement.job_id == job_id)
                                          .order_by(Placement.id).with_for_update()))
    live = [p for p in placements if p.state in PLACEMENT_LIVE_STATES]
    current: dict[str, Placement] = {}
    for placement in placements:
        if placement.part not in current or placement.generation > current[placement.part].generation:
            current[placement.part] = placement
    policy = Policy.of(job.manifest, job.placement_mode)
    result: Aggregate = aggregate(policy, [PartView(p.part, p.cluster_name, p.state, p.status or {})
                                           for p in current.values()],
                                  job.restart_count if job.placement_mode == "split" else 0)
    status = {**result.status, **({"drift": job.status["drift"]} if (job.status or {}).get("drift") else {})}
    if status != job.status:
        job.status = status  # a finished job's too: counts that come after the verdict refine what it shows
    changes = Changes()
    if job.state in JOB_FINISHED_STATES or job.cancel_requested_at is not None:
        why = "cancelled" if job.cancel_requested_at is not None else f"job {job.state.lower()}"
        for placement in live:
            if placement.state != "Deleting":
                placement.state, placement.last_error, placement.next_attempt_at = "Deleting", why, None
                changes.dispatch = True
        if job.cancel_requested_at is not None and job.state not in JOB_FINISHED_STATES and not live:
            finish_job(session, job, "Cancelled", "cancelled; removed from every member", now)
        return changes
    if job.placement_mode == "whole":  # the member's restarts that its failure policy counts toward maxRestarts
        job.restart_count = result.status["restartsCountTowardsMax"]
    if result.state is not None:
        finish_job(session, job, result.state, result.message, now)
        return changes.add(settle_job(session, job_id, now))
    if job.state in PLACED_JOB_STATES and not live:
        # every part with a verdict was settled above: what is left ended without one (deleted, lost
        # with its member), and only those parts are placed again
        lost = [p for p in current.values() if p.state not in VERDICT_STATES]
        requeue(session, job, "; ".join(f"{part_where(p)}: {p.last_error or 'deleted'}" for p in lost))
        changes.requeued.add(job.id)
    elif job.state in DISPATCHING_JOB_STATES and current and \
            all(p.state in ("Starting", "Running", "Succeeded") for p in current.values()):
        clusters = ", ".join(sorted({p.cluster_name for p in current.values()}))
        if all(p.state in ("Running", "Succeeded") for p in current.values()):
            job.state, job.reason = "Running", None
            job.started_at = job.started_at or now
            job_event(session, job, "Running", f"every pod ready on {clusters}")
        elif job.state != "Starting":
            job.state, job.reason = "Starting", f"on {clusters}; waiting for its pods to be ready"
            job_event(session, job, "Starting", job.reason)
    return changes


def finish_job(session: Session, job: Job, state: str, message: str, now: datetime) -> None:
    job.state, job.finished_at, job.reason = state, now, message
    job_event(session, job, state, message, warning=state == "Failed")


def requeue(session: Session, job: Job, message: str, reason: str = "Requeued") -> None:
    job.state, job.reason, job.admitted_at = "Queued", message, None
    job_event(session, job, reason, f"{message}; back in its queue")


def job_event(session: Session, job: Job, reason: str, message: str, *, warning: bool = False) -> None:
    events.record(session, "job", job.id, reason, message, warning=warning, tenant_id=job.tenant_id)
