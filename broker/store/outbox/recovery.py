"""Recovery: placements moved off members that cannot keep them (fail-over), and gangs whose pods did not all become
ready within their startup timeout evicted and placed again after a back-off (Kueue's waitForPodsReady)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Collection, Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.engine.jobset import STARTUP_TIMEOUT_ANNOTATION, startup_timeout
from broker.engine.status import not_ready
from broker.store.db.models import (JOB_FINISHED_STATES, PLACEMENT_ACTIVE_STATES, PLACEMENT_LIVE_STATES,
                                    PLACEMENT_UNSTARTED_STATES, Cluster, Event, Job, Placement, as_utc)
from broker.store.outbox.apply import cancelled_with_work
from broker.store.outbox.locks import lock_job, lock_jobs, lock_placement
from broker.store.outbox.settle import finish_job, job_event, part_where, requeue, settle_job
from broker.store.outbox.work import Changes
from clusters.jobsets import member_name


def _fail_over_targets(session: Session, now: datetime, toleration: float) -> list[tuple[Placement, str]]:
    """The placements `fail_over` moves off their members, each with why."""
    targets: list[tuple[Placement, str]] = []
    for cluster in session.scalars(select(Cluster).where(Cluster.state.in_(("NotReady", "Draining")))):
        if cluster.state == "NotReady":
            since = _not_ready_since(session, cluster)
            if since is None or (now - since).total_seconds() < toleration:
                continue
            message = f"member {cluster.name} not ready for {(now - since).total_seconds():.0f}s: failing over"
            states = PLACEMENT_ACTIVE_STATES
        else:
            message, states = f"member {cluster.name} is draining: placing it elsewhere", PLACEMENT_UNSTARTED_STATES
        targets += [(p, message) for p in session.scalars(
            select(Placement).where(Placement.cluster_id == cluster.id, Placement.state.in_(states)))]
    targets += [(p, f"member {p.cluster_name} was removed: failing over") for p in session.scalars(
        select(Placement).where(Placement.cluster_id.is_(None), Placement.state.in_(PLACEMENT_LIVE_STATES)))]
    return targets


def cancellations_or_fail_over_due(session: Session, now: datetime, toleration: float) -> bool:
    """Whether `request_deletions` or `fail_over` has anything to do: read first, so that a dispatcher pass with
    nothing to do takes no write lock (on SQLite the cancelled jobs' query scans the jobs table, the whole backlog,
    every pass: held under the write lock, every submission waited for it)."""
    return bool(cancelled_with_work(session)) or bool(_fail_over_targets(session, now, toleration))


def fail_over(session: Session, now: datetime, toleration: float) -> Changes:
    """Move placements off members that cannot keep them, for the scheduler to place again:
    - a member NotReady for longer than `toleration` seconds: all its live placements;
    - a Draining member: those not started yet (Decided, Applying, Starting);
    - a removed member: all of them (there is nothing left to delete there).
    The old copy is marked Deleting: deleted once its member answers, before anything new starts there."""
    changes = Changes()
    targets = _fail_over_targets(session, now, toleration)
    lock_jobs(session, {p.job_id for p, _ in targets})
    # read again under the locks: while it waited for them, a copy on a draining member may have started (it stays),
    # a member may have come back or been uncordoned
    still = {p.id for p, _ in _fail_over_targets(session, now, toleration)}
    for placement, message in targets:
        if placement.id not in still:
            continue
        job = lock_job(session, placement.job_id)
        placement = lock_placement(session, placement.id)
        if placement.state not in PLACEMENT_LIVE_STATES:
            continue
        if placement.cluster_id is None:
            placement.state, placement.finished_at = "Deleted", now  # nothing left to delete there
        elif placement.state != "Deleting":
            placement.state, placement.last_error, placement.next_attempt_at = "Deleting", message, None
            changes.dispatch = True  # the member's dispatcher, in whichever replica's lane, deletes the copy
        else:
            continue
        changes.freed = True
        if job.state not in JOB_FINISHED_STATES and job.cancel_requested_at is None and job.state != "Queued":
            requeue(session, job, f"{part_where(placement)}: {message}", "FailedOver")
            changes.requeued.add(job.id)
        changes.add(settle_job(session, job.id, now))
    return changes


@dataclass(frozen=True)
class Unready:
    """A placement Starting for longer than its startup timeout: its member is asked why before it goes."""

    placement_id: int
    job_id: int
    cluster_id: int
    namespace: str
    name: str  # the JobSet's name on the member
    timeout: float


@dataclass(frozen=True)
class StartupPolicy:
    """Kueue's waitForPodsReady, for the federation (the settings of the same names)."""

    timeout: float
    backoff: float
    avoid: float
    eviction_limit: int
    backoff_cap: float = 3600.0


def overdue_startups(session: Session, now: datetime, default_timeout: float,
                     clusters: Collection[int]) -> list[Unready]:
    """Placements on `clusters` whose pods are not all ready within the startup timeout (the job's annotation, or
    the default). Only those clusters' placements are read: a lane, or the pull members, reads its own."""
    if not clusters:
        return []
    overdue = []
    for row in session.execute(
            select(Placement.id, Placement.job_id, Placement.cluster_id, Placement.part, Placement.applied_at,
                   Job.namespace, Job.name,
                   Job.manifest[("metadata", "annotations", STARTUP_TIMEOUT_ANNOTATION)].as_string().label("timeout"))
            .join(Job, Job.id == Placement.job_id)
            .where(Placement.state == "Starting", Placement.applied_at.is_not(None),
                   Placement.cluster_id.in_(list(clusters)))):
        timeout = (startup_timeout(row.timeout) if row.timeout else None) or default_timeout
        if now - as_utc(row.applied_at) >= timedelta(seconds=timeout):
            overdue.append(Unready(row.id, row.job_id, row.cluster_id, row.namespace, member_name(row.name, row.part),
                                   timeout))
    return overdue


def evict_all_unready(session: Session, overdue: Iterable[tuple[Unready, str]], now: datetime,
                      policy: StartupPolicy) -> Changes:
    """`evict_unready` for each (placement, what its member said of its pods), their jobs locked first, ids
    ascending, as every batch locks them: in the order found, a job placed again after a requeue comes first."""
    overdue = list(overdue)
    lock_jobs(session, [unready.job_id for unready, _ in overdue])
    changes = Changes()
    for unready, pods in overdue:
        changes.add(evict_unready(session, unready, pods, now, policy))
    return changes


def evict_unready(session: Session, unready: Unready, pods: str, now: datetime, policy: StartupPolicy) -> Changes:
    """Its pods did not all become ready in time: the whole gang goes (parts already done stay done); the
    job is placed again after an exponential back-off, away from that member for a while, or fails once
    it was evicted `eviction_limit` times. `pods` is what the member said of the pods not ready."""
    job = lock_job(session, unready.job_id)
    placement = lock_placement(session, unready.placement_id)
    if job is None or placement is None or placement.state != "Starting" or job.cancel_requested_at is not None \
            or job.state in JOB_FINISHED_STATES:
        return Changes()  # ready, moved or cancelled meanwhile
    why = (f"{part_where(placement)}: pods not all ready within {unready.timeout:.0f}s "
           f"({not_ready(placement.status)}{'; ' + pods if pods else ''})")
    job.evictions += 1
    job_event(session, job, "Evicted", why, warning=True)
    for other in session.scalars(select(Placement).where(Placement.job_id == job.id,
                                                         Placement.state.in_(PLACEMENT_ACTIVE_STATES))
                                 .with_for_update()):
        other.state, other.last_error, other.next_attempt_at = "Deleting", why, None
    if job.evictions >= policy.eviction_limit:
        finish_job(session, job, "Failed", f"evicted {job.evictions} times, the last: {why}", now)
    else:
        delay = min(policy.backoff * 2 ** (job.evictions - 1), policy.backoff_cap)
        until = now + timedelta(seconds=policy.avoid)
        job.requeue_at = now + timedelta(seconds=delay)
        job.avoid = {**{c: t for c, t in (job.avoid or {}).items() if datetime.fromisoformat(t) > now},
                     placement.cluster_name: until.isoformat()}
        requeue(session, job, f"evicted ({job.evictions} of {policy.eviction_limit}): placed again after "
                               f"{delay:.0f}s, not on {placement.cluster_name} until {until:%H:%M:%S} UTC")
    return settle_job(session, job.id, now).add(Changes(dispatch=True, freed=True))


def _not_ready_since(session: Session, cluster: Cluster) -> datetime | None:
    moment = session.scalar(select(func.max(Event.time)).where(Event.kind == "cluster",
                                                              Event.object_id == cluster.name,
                                                              Event.reason == "MemberNotReady"))
    return as_utc(moment) if moment else None
