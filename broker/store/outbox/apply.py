"""Apply and delete: a member pass's due work (`due_work`, each copy rendered with the cluster's override rules), and
what each member call came to — Decided → Applying before the call, then Starting, retried later, failed, or
Deleted."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Iterable

from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.orm import Session

from broker.engine.jobset import CLUSTER_SELECTOR_ANNOTATION
from broker.engine.overrides import OverrideError, apply_overrides
from broker.engine.status import member_status, newer
from broker.store import events
from broker.store.cluster_overrides import cluster_labels, stored_rules
from broker.store.db.models import (JOB_FINISHED_STATES, PLACEMENT_ACTIVE_STATES, PLACEMENT_LIVE_STATES, Cluster, Job,
                                    Placement, Tenant)
from broker.store.db.session import in_chunks
from broker.store.outbox.follow import follow_status
from broker.store.outbox.locks import lock_job, lock_job_rows, lock_jobs, lock_placement
from broker.store.outbox.settle import finish_job, job_event, requeue, settle_job
from broker.store.outbox.work import KEPT_STATES, VERDICT_STATES, WORK_STATES, Changes, Work
from clusters.claim_templates import member_templates
from clusters.jobsets import admission_key, member_copy, member_name, namespace_labels, stamp
from clusters.rules.labels import parse_selector
from clusters.rules.pod_security import template_refusal


def due_work(session: Session, now: datetime, cluster_ids: Iterable[int], limit: int = 1000) -> list[Work]:
    """Placements with member work due on the given clusters, oldest first. Each job's manifest is read
    once however many of its parts are due, and each part rendered from it copies only that part."""
    due = or_(and_(Placement.state.in_(WORK_STATES),
                   or_(Placement.next_attempt_at.is_(None), Placement.next_attempt_at <= now)),
              and_(Placement.state.in_(VERDICT_STATES), Placement.next_attempt_at <= now))  # a finished copy's end
    rows = session.execute(
        select(Placement, Job.namespace, Job.name, Tenant.name, Tenant.pod_security, Tenant.adoptable_namespaces)
        .join(Job, Job.id == Placement.job_id).join(Tenant, Tenant.id == Job.tenant_id)
        .where(due, Placement.cluster_id.in_(list(cluster_ids)))
        .order_by(Placement.id).limit(limit)).all()
    applied = sorted({row[0].job_id for row in rows if row[0].state in ("Decided", "Applying")})
    manifests: dict[int, Any] = {}
    templates: dict[int, list] = {}
    for chunk in in_chunks(applied):
        for job_id, manifest, claim_templates in session.execute(
                select(Job.id, Job.manifest, Job.claim_templates).where(Job.id.in_(chunk))):
            manifests[job_id], templates[job_id] = manifest, claim_templates or []
    rules, labels = (stored_rules(session), cluster_labels(session)) if applied else ([], {})
    work = []
    for placement, namespace, name, tenant, pod_security, adoptable in rows:
        item = Work(placement.id, placement.job_id, placement.cluster_id, placement.cluster_name, placement.state,
                    namespace, member_name(name, placement.part), placement.member_uid, placement.attempts, None,
                    namespace_labels=namespace_labels(tenant, pod_security), adoptable=namespace in adoptable)
        if not item.deletes:
            item = _rendered(item, placement, manifests[placement.job_id], rules,
                             labels.get(placement.cluster_name, {}), pod_security, templates[placement.job_id])
        work.append(item)
    return work


def _rendered(work: Work, placement: Placement, manifest: Any, rules: list, labels: dict[str, str],
              pod_security: str, claim_templates: list) -> Work:
    """The work with the JobSet its member is sent: the tenant's part, rewritten by the cluster's override
    rules, then stamped with the broker's labels and node pins; or refused, naming the rule — or the tenant's Pod
    Security level, lowered since the job was submitted."""
    jobset = member_copy(manifest, namespace=work.namespace, part=placement.part)
    lowered = template_refusal(jobset, pod_security)
    if lowered:
        return replace(work, refused=f"its tenant's Pod Security level is now {pod_security}: {lowered[0]}: "
                                     f"{lowered[1]}")
    try:
        jobset, applied = apply_overrides(rules, placement.cluster_name, labels, jobset, pod_security)
    except OverrideError as exc:
        return replace(work, refused=str(exc))
    key = admission_key(jobset)
    jobset = stamp(jobset, job_id=placement.job_id, placement_id=placement.id, generation=placement.generation,
                   part=placement.part, assignments=placement.assignments)
    return replace(work, overrides=applied, admission_key=key, jobset=jobset, claim_templates=tuple(member_templates(
        claim_templates, jobset, job_id=placement.job_id, placement_id=placement.id)) if claim_templates else ())


def tenant_namespace_labels(session: Session) -> dict[str, dict[str, str]]:
    """Every tenant's namespace → the labels the broker keeps on it on the members (its tenant and Pod Security
    level: clusters.jobsets.namespace_labels)."""
    return {namespace: namespace_labels(name, level)
            for name, namespaces, level in session.execute(select(Tenant.name, Tenant.namespaces, Tenant.pod_security))
            for namespace in namespaces}


def kept_placements(session: Session, placement_ids: Iterable[int]) -> set[int]:
    """Those of these placements whose member copy the broker still owns; a copy of any other is stale.

    Whatever cluster row a placement names: a copy is never deleted while its placement is kept."""
    ids = sorted(set(placement_ids))
    kept: set[int] = set()
    for chunk in in_chunks(ids):
        kept.update(session.scalars(select(Placement.id).where(Placement.id.in_(chunk),
                                                               Placement.state.in_(KEPT_STATES))))
    return kept


# Apply -------------------------------------------------------------------------------------------

# A job cancelled or finished since the pass read its work is not started on a member after all. Correlated: as
# `job_id IN (SELECT ...)`, SQLite listed every live job (a scan of 100,000 took 30 ms) for each statement.
_job_meant_to_run = exists().where(Job.id == Placement.job_id, Job.cancel_requested_at.is_(None),
                                   Job.state.not_in(JOB_FINISHED_STATES))


def start_apply(session: Session, works: list[Work]) -> set[int]:
    """Decided → Applying (and their jobs Admitted → Dispatching); the placement ids that moved (not
    those cancelled or failed over meanwhile)."""
    moved: set[int] = set()
    lock_job_rows(session, [w.job_id for w in works])
    ids = [w.placement_id for w in works]
    for chunk in in_chunks(ids):
        moved.update(session.scalars(update(Placement).where(Placement.id.in_(chunk), Placement.state == "Decided",
                                                             _job_meant_to_run)
                                     .values(state="Applying").returning(Placement.id)
                                     .execution_options(synchronize_session=False)))
    jobs = sorted({w.job_id for w in works if w.placement_id in moved})
    for chunk in in_chunks(jobs):
        session.execute(update(Job).where(Job.id.in_(chunk), Job.state == "Admitted").values(state="Dispatching")
                        .execution_options(synchronize_session=False))
    return moved


def finish_apply(session: Session, work: Work, jobset: dict[str, Any], now: datetime, *, adopted: bool) -> Changes:
    """Applying → Starting (or further, if the member's status already says so)."""
    job = lock_job(session, work.job_id)
    placement = lock_placement(session, work.placement_id)
    if placement is None or placement.cluster_id != work.cluster_id:  # its member was removed while the call ran
        events.record(session, "cluster", work.cluster, "CopyOrphaned",
                      f"{work.namespace}/{work.name} (placement {work.placement_id}) was applied as the member was "
                      f"being removed: the dispatcher deletes it", warning=True)
        return Changes(orphans=[replace(work, member_uid=jobset["metadata"]["uid"])])
    if job is None or placement.state != "Applying":
        return Changes()  # cancelled or failed over meanwhile: its Deleting step removes the copy
    seen = placement.status or {}
    status = member_status(jobset, seen, now)
    if seen.get("uid") == status["uid"] and newer(seen, status):
        status = dict(seen)  # the status watch saw the copy further along than the apply's answer
    status["appliedGeneration"] = jobset["metadata"].get("generation")
    redone = placement.member_uid is None and placement.started_at is not None
    placement.member_uid, placement.status = status["uid"], status
    placement.attempts, placement.last_error, placement.next_attempt_at = 0, None, None
    placement.state, placement.applied_at = "Starting", now
    placement.overrides = list(work.overrides)
    what = f"{work.namespace}/{work.name}"
    verb = "adopted the existing copy" if adopted else ("recreated" if redone else "applied")
    rewritten = f"; override rules {', '.join(work.overrides)}" if work.overrides else ""
    job_event(session, job, "Applied", f"{verb} {what} on {work.cluster} (placement {placement.id}, "
                                        f"generation {placement.generation}{rewritten})")
    return follow_status(session, job, placement, status, now)


def retry_later(session: Session, work: Work, error: str, delay: float, now: datetime) -> None:
    """The member could not do it now (timeout, 5xx, 429, a copy still in the way): try again later."""
    placement = lock_placement(session, work.placement_id)
    if placement is None or placement.state != work.state:
        return
    if placement.last_error != error:
        job = session.get(Job, work.job_id)
        job_event(session, job, "MemberRetrying", f"{work.cluster}: {error}; retrying", warning=True)
    placement.attempts += 1
    placement.last_error = error
    placement.next_attempt_at = now + timedelta(seconds=delay)


def fail_apply(session: Session, work: Work, error: str, now: datetime) -> Changes:
    """The member refused the JobSet for good (invalid, forbidden), or an override rule would make it invalid
    (`work.refused`, before any member call): the placement and the job fail."""
    job = lock_job(session, work.job_id)
    placement = lock_placement(session, work.placement_id)
    if job is None or placement is None or placement.state != work.state:
        return Changes()
    placement.state, placement.finished_at, placement.last_error = "Failed", now, error
    reason, why = ("OverrideFailed", f"{error}, on {work.cluster}") if work.refused else \
        ("ApplyFailed", f"{work.cluster} refused the JobSet: {error}")
    job_event(session, job, reason, why, warning=True)
    if job.state not in JOB_FINISHED_STATES and job.cancel_requested_at is None:
        finish_job(session, job, "Failed", why, now)
    return settle_job(session, job.id, now).add(Changes(freed=True))


def refuse_apply(session: Session, work: Work, error: str, now: datetime) -> Changes:
    """The member's admission refused the copy (a dry run's or an apply's answer: invalid, forbidden, a webhook, a
    policy, a quota): that member is out for this job, which goes back to its queue to be placed elsewhere (its
    other parts with it: all or nothing), or fails once every member it could go to refused it."""
    job = lock_job(session, work.job_id)
    placement = lock_placement(session, work.placement_id)
    if job is None or placement is None or placement.state != work.state:
        return Changes()
    # nothing was made there: the placement is gone (Deleted), not failed, or its job would fail with it
    placement.state, placement.finished_at, placement.last_error = "Deleted", now, f"refused: {error}"
    job.refused = {**(job.refused or {}), work.cluster: error}
    job_event(session, job, "Refused", f"{work.cluster} refused the JobSet: {error}", warning=True)
    if job.state in JOB_FINISHED_STATES or job.cancel_requested_at is not None:
        return settle_job(session, job.id, now).add(Changes(freed=True))
    left = _members_left(session, job)
    if not left:
        refusals = "; ".join(f"{cluster}: {why}" for cluster, why in sorted(job.refused.items()))
        finish_job(session, job, "Failed", f"every member it could run on refused it ({refusals})", now)
        return settle_job(session, job.id, now).add(Changes(freed=True))
    for other in session.scalars(select(Placement).where(Placement.job_id == job.id, Placement.id != placement.id,
                                                         Placement.state.in_(PLACEMENT_ACTIVE_STATES))
                                 .with_for_update()):
        other.state, other.last_error, other.next_attempt_at = "Deleting", f"{work.cluster} refused a part", None
    requeue(session, job, f"{work.cluster} refused it: {error}; {', '.join(left)} may take it")
    return settle_job(session, job.id, now).add(Changes(requeued={job.id}, dispatch=True, freed=True))


def _members_left(session: Session, job: Job) -> list[str]:
    """The registered members its cluster selector allows that have not refused it, by name."""
    selector = parse_selector(((job.manifest.get("metadata") or {}).get("annotations") or {}).get(
        CLUSTER_SELECTOR_ANNOTATION, ""))
    return sorted(name for name, labels in session.execute(select(Cluster.name, Cluster.labels))
                  if name not in (job.refused or {}) and selector.matches(labels or {}))


# Delete ------------------------------------------------------------------------------------------

def finish_delete(session: Session, work: Work, now: datetime) -> Changes:
    """Deleting → Deleted: the member copy is gone. A finished copy deleted after the tenant's TTL keeps its
    verdict: only its copy is gone (no uid, nothing more due)."""
    job = lock_job(session, work.job_id)
    placement = lock_placement(session, work.placement_id)
    if job is None or placement is None or placement.state != work.state or not work.deletes:
        return Changes()
    if placement.state in VERDICT_STATES:
        placement.member_uid, placement.next_attempt_at, placement.attempts = None, None, 0
        job_event(session, job, "CopyDeleted", f"deleted the finished JobSet {work.namespace}/{work.name} from "
                                               f"{work.cluster}, as its ttlSecondsAfterFinished asks")
        return Changes()
    placement.state, placement.finished_at, placement.next_attempt_at = "Deleted", now, None
    job_event(session, job, "Deleted", f"deleted {work.namespace}/{work.name} from {work.cluster}")
    return settle_job(session, job.id, now).add(Changes(freed=True))


def cancelled_with_work(session: Session) -> list[int]:
    """Cancelled jobs with something to do: a copy not yet being deleted, or none left at all (Cancelled); a job
    whose copies are all Deleting waits for the member, not for this pass."""
    live = Placement.job_id == Job.id
    return list(session.scalars(select(Job.id).where(
        Job.cancel_requested_at.is_not(None), Job.state.not_in(JOB_FINISHED_STATES),
        or_(exists().where(live, Placement.state.in_(PLACEMENT_ACTIVE_STATES)),
            ~exists().where(live, Placement.state.in_(PLACEMENT_LIVE_STATES))))))


def request_deletions(session: Session, now: datetime) -> Changes:
    """Cancelled jobs: every live placement to Deleting (or the job Cancelled when none is left)."""
    changes = Changes()
    job_ids = cancelled_with_work(session)
    lock_jobs(session, job_ids)
    for job_id in job_ids:
        changes.add(settle_job(session, job_id, now))
    return changes
