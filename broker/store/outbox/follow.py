"""Status from the members: each copy's JobSet as a watch or a list saw it, followed into its placement and job;
a copy deleted or changed on its member by someone else is drift, and reported.

A copy that vanishes is run again only when the broker knows it had not finished:
- a watch's DELETED event carries the copy's last state: finished, its verdict is recorded (the copy is gone, it
  is not deleted again); not finished, the broker knows it was cut short, and applies it again (`_drifted`);
- a list that no longer shows a copy still running (the broker restarted, its lease moved, its watch relisted
  after 410 Gone, or a pull member's agent listed): what happened between the last status and the list is not
  known, so the copy is not run again; it fails, saying so, and its job with it (`_vanished`).
The copies carry no TTL of their own (clusters.jobsets.member_copy): a member deletes none as it finishes, and a
finished one is deleted by the broker once its verdict is recorded, `ttlSecondsAfterFinished` later.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.status import Policy, failure_message, member_status, newer, part_failure, placement_state
from broker.store.db.models import JOB_FINISHED_STATES, Job, Placement
from broker.store.db.session import in_chunks
from broker.store.outbox.locks import LOCKED, lock_job, lock_jobs, lock_placement
from broker.store.outbox.settle import finish_job, job_event, part_where, requeue, settle_job
from broker.store.outbox.work import ON_MEMBER_STATES, VERDICT_STATES, Changes
from clusters.jobsets import member_name, ttl_after_finished


def record_statuses(session: Session, reports: Iterable[tuple[int, dict[str, Any], bool]], now: datetime, *,
                    also_locking: Iterable[int] = ()) -> Changes:
    """Member JobSets of the broker as watches or a list saw them — (cluster id, object, deleted) each, in the order
    seen — in one transaction (`lock_reported` first)."""
    reports = list(reports)
    lock_reported(session, reports, also_locking)
    changes = Changes()
    for cluster_id, obj, deleted in reports:
        changes.add(record_status(session, cluster_id, obj, now, deleted=deleted))
    return changes


def lock_reported(session: Session, reports: Sequence[tuple[int, dict[str, Any], bool]],
                  also_locking: Iterable[int] = ()) -> None:
    """Lock the jobs and placements these reports are on (with the jobs `also_locking` names, that the transaction
    goes on to change), ids ascending as every batch locks them (`lock_jobs`): two batches never wait for each other
    in a cycle."""
    placement_ids = sorted({i for i in (_placement_id(obj) for _, obj, _ in reports) if i is not None})
    lock_jobs(session, [*also_locking, *(job_id for chunk in in_chunks(placement_ids) for job_id in session.scalars(
        select(Placement.job_id).where(Placement.id.in_(chunk))))])


def _placement_id(jobset: dict[str, Any]) -> int | None:
    """The broker placement a member JobSet is a copy of, by its label (None: not one of the broker's)."""
    try:
        return int(jobset["metadata"]["labels"]["archipelago.io/placement-id"])
    except (KeyError, TypeError, ValueError):
        return None


def record_status(session: Session, cluster_id: int, jobset: dict[str, Any], now: datetime, *,
                  deleted: bool = False) -> Changes:
    """One member JobSet of the broker as a watch or a list saw it (or its deletion)."""
    placement_id = _placement_id(jobset)
    if placement_id is None:
        return Changes()
    locked = session.info.get(LOCKED)  # a batch's rows (`lock_reported`): no query per copy
    row = (locked.placements.get(placement_id) if locked is not None else None) or session.execute(
        select(Placement.job_id, Placement.cluster_id).where(Placement.id == placement_id)).first()
    if row is None or row.cluster_id != cluster_id:
        return Changes()  # not a copy the broker placed here: the member's sweep deletes it
    job = lock_job(session, row.job_id)
    placement = lock_placement(session, placement_id)
    status = member_status(jobset, placement.status, now)
    if placement.state == "Applying" and not deleted:
        if newer(status, placement.status):  # seen before the dispatcher records the apply: kept for it
            placement.status = status
        return Changes()
    if placement.state not in ON_MEMBER_STATES + VERDICT_STATES or status["uid"] != placement.member_uid:
        return Changes()  # being deleted, or another copy: nothing to learn
    if placement.state in VERDICT_STATES:
        if deleted:  # gone before the broker's own deletion: nothing left to delete
            placement.member_uid, placement.next_attempt_at = None, None
            return Changes()
        if not newer(status, placement.status):
            return Changes()
        # the verdict stands; counts that lagged it refine what the placement and its job show
        placement.status = {**status, "appliedGeneration": placement.status.get("appliedGeneration")}
        return settle_job(session, job.id, now)
    if deleted and newer(status, placement.status) and placement_state(status) in VERDICT_STATES:
        status["appliedGeneration"] = placement.status.get("appliedGeneration")
        changes = follow_status(session, job, placement, status, now)  # it ended, then went: its verdict stands
        placement.member_uid, placement.next_attempt_at = None, None
        return changes
    if deleted:
        return _drifted(session, job, placement, f"{_where(job, placement)} was deleted on "
                                                 f"{placement.cluster_name} by someone else", now)
    if not newer(status, placement.status):
        return Changes()
    applied = placement.status.get("appliedGeneration")
    if applied is not None and status["generation"] is not None and status["generation"] > applied:
        return _drifted(session, job, placement, f"{_where(job, placement)} was changed on "
                                                 f"{placement.cluster_name} by someone else (generation "
                                                 f"{applied} → {status['generation']})", now)
    status["appliedGeneration"] = applied
    return follow_status(session, job, placement, status, now)


def record_list(session: Session, cluster_id: int, items: list[dict[str, Any]], listed_version: str,
                now: datetime) -> Changes:
    """A list of the broker's copies on a member: what each one shows (`record_statuses`), and the copies gone
    since — those it does not show that were there before it. The jobs of both are locked together, ids ascending:
    the gone ones' locked after the shown ones' could wait, holding those, for a batch that holds a gone one and
    waits for a shown one (PostgreSQL would abort one of the two)."""
    present = {obj["metadata"]["uid"] for obj in items}
    gone = [(placement_id, job_id, uid) for placement_id, job_id, uid, status in session.execute(
        select(Placement.id, Placement.job_id, Placement.member_uid, Placement.status)
        .where(Placement.cluster_id == cluster_id, Placement.state.in_(ON_MEMBER_STATES))).all()
        if uid not in present and not newer(status, {"resourceVersion": listed_version})]
    changes = record_statuses(session, ((cluster_id, obj, False) for obj in items), now,
                              also_locking=[job_id for _, job_id, _ in gone])
    for placement_id, job_id, uid in gone:
        job = lock_job(session, job_id)
        placement = lock_placement(session, placement_id)
        if placement.state in ON_MEMBER_STATES and placement.member_uid == uid:
            changes.add(_vanished(session, job, placement, listed_version, now))
    return changes


def _where(job: Job, placement: Placement) -> str:
    return f"JobSet {job.namespace}/{member_name(job.name, placement.part)}"


def _drifted(session: Session, job: Job, placement: Placement, message: str, now: datetime) -> Changes:
    """Someone else deleted or changed the broker's copy: report it; re-apply while the job is meant to run."""
    meant_to_run = job.state not in JOB_FINISHED_STATES and job.cancel_requested_at is None
    job.status = {**(job.status or {}), "drift": message}
    if meant_to_run:
        placement.state, placement.attempts, placement.next_attempt_at = "Applying", 0, None
        if "deleted" in message:
            placement.member_uid = None
        job_event(session, job, "Drift", f"{message}; applying it again", warning=True)
        return Changes(dispatch=True)
    placement.state, placement.finished_at = "Deleted", now
    job_event(session, job, "Drift", message, warning=True)
    return settle_job(session, job.id, now)


def _vanished(session: Session, job: Job, placement: Placement, listed_version: str, now: datetime) -> Changes:
    """A list no longer shows a copy the broker last saw running: whether it finished in between is not known (a
    finished copy is not deleted by its member, but someone else may have deleted it, or one applied before the
    broker kept TTLs to itself). It is not run again: the part fails, saying so, and the job with it; a job no
    longer meant to run only records that it went."""
    if job.state in JOB_FINISHED_STATES or job.cancel_requested_at is not None:
        return _drifted(session, job, placement, f"{_where(job, placement)} was deleted on "
                                                 f"{placement.cluster_name} by someone else", now)
    last = placement.status or {}
    message = (f"{_where(job, placement)} vanished from {placement.cluster_name} between its last status "
               f"(resourceVersion {last.get('resourceVersion')}, {placement.state}) and a list at "
               f"{listed_version}: whether it finished is not known, so it is not run again")
    job.status = {**(job.status or {}), "drift": message}
    job_event(session, job, "CopyVanished", message, warning=True)
    failed = {**last, "terminalState": "Failed", "conditions": [
        *(last.get("conditions") or ()), {"type": "Failed", "status": "True", "reason": "CopyVanished",
                                          "message": message}]}
    placement.state, placement.finished_at, placement.last_error = "Failed", now, message
    placement.status, placement.member_uid, placement.next_attempt_at = failed, None, None
    finish_job(session, job, "Failed", f"{part_where(placement)}: {message}", now)
    return settle_job(session, job.id, now).add(Changes(freed=True))


def follow_status(session: Session, job: Job, placement: Placement, status: dict[str, Any],
                   now: datetime) -> Changes:
    """A placement's new member status: its state, and for a failed split part, restart or fail; a restart by the
    member's own failure policy is an event."""
    restarts = int(status.get("restarts") or 0)
    if restarts > int((placement.status or {}).get("restarts") or 0):
        counted = status.get("restartsCountTowardsMax")
        job_event(session, job, "MemberRestarted", f"{part_where(placement)}: its member restarted the JobSet "
                                                   f"(restart {restarts}" + ("" if counted is None else
                                                   f", {counted} counting toward its maxRestarts") + ")")
    placement.status = status
    state = placement_state(status)
    if state == "Starting" and placement.state == "Running":
        state = "Running"  # once ready, pods the member restarts are its own business (its failure policy)
    changes = Changes()
    if state == "Running" and placement.started_at is None:
        placement.started_at = now
    if state != placement.state:
        placement.state = state
        if state in VERDICT_STATES:
            placement.finished_at = now
            changes.freed = True
            ttl = ttl_after_finished(job.manifest)
            if ttl is not None:  # the tenant's TTL, kept by the broker: the copy goes once the verdict is recorded
                placement.next_attempt_at, placement.attempts = now + timedelta(seconds=ttl), 0
                changes.dispatch = True
            where = part_where(placement)
            if state == "Succeeded":
                job_event(session, job, "PartSucceeded" if placement.part else "MemberSucceeded",
                           f"{where} completed")
            else:
                job_event(session, job, "PartFailed" if placement.part else "MemberFailed",
                           f"{where} failed: {failure_message(status)}", warning=True)
        if state == "Failed" and placement.part and job.state not in JOB_FINISHED_STATES \
                and job.cancel_requested_at is None:
            decision = part_failure(Policy.of(job.manifest, job.placement_mode), placement.part, job.restart_count)
            if decision.restart:
                job.restart_count += int(decision.counted)
                changes.requeued.add(job.id)
                requeue(session, job, decision.message, "PartRestarting")
            else:
                finish_job(session, job, "Failed", decision.message, now)
    return changes.add(settle_job(session, job.id, now))
