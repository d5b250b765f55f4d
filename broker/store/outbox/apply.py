"""Propagation, status and recovery in the database: the placement outbox and the job it serves.

Functions take a session in a write transaction (`Database.write`) and leave the commit to the
caller, which commits each step BEFORE it acts on a member. A placement moves

    Decided ─▶ Applying ─▶ Starting ─▶ Running ─▶ Succeeded | Failed
       └──────────┴───────────┴──────────┴──▶ Deleting ─▶ Deleted

Decided is the scheduler's; Applying is committed before the member is touched, so a broker killed
at any instant re-applies (server-side apply is idempotent and adopts the copy labelled with the
placement id); Deleting is committed before the delete, and deleting again is harmless. The job
follows its placements (`settle_job`): Admitted ─▶ Dispatching ─▶ Running ─▶ Succeeded | Failed,
Cancelled once every copy is gone, and back to Queued when its placements were preempted, its
member failed over, or a failed part of a split JobSet is to be re-placed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Collection, Iterable, Sequence

from sqlalchemy import exists, func, or_, select, update
from sqlalchemy.orm import Session

from broker import events
from broker.db.models import (JOB_FINISHED_STATES, PLACEMENT_ACTIVE_STATES, PLACEMENT_LIVE_STATES,
                              PLACEMENT_UNSTARTED_STATES, Cluster, Event, Job, Placement, as_utc)
from broker.db.session import in_chunks
from broker.cluster_overrides import cluster_labels, stored_rules
from broker.jobset import STARTUP_TIMEOUT_ANNOTATION, startup_timeout
from broker.overrides import OverrideError, apply_overrides
from broker.status import (Aggregate, PartView, Policy, aggregate, failure_message, member_status, newer,
                           not_ready, part_failure, placement_state)
from clusters.jobsets import member_copy, member_name, stamp

ON_MEMBER_STATES = ("Starting", "Running")  # a copy the status watch follows
VERDICT_STATES = ("Succeeded", "Failed")  # the member judged the copy: it is never judged again
KEPT_STATES = ("Applying", *ON_MEMBER_STATES, *VERDICT_STATES)  # copies the broker still owns
WORK_STATES = ("Decided", "Applying", "Deleting")
DISPATCHING_JOB_STATES = ("Admitted", "Dispatching", "Starting")  # not Running yet
PLACED_JOB_STATES = (*DISPATCHING_JOB_STATES, "Running")
LOCKED = "archipelago.locked"  # session.info key: the rows `lock_jobs` holds for this transaction


@dataclass(frozen=True)
class Work:
    """One placement's next member action, as a dispatcher pass read it."""

    placement_id: int
    job_id: int
    cluster_id: int
    cluster: str
    state: str  # Decided, Applying or Deleting
    namespace: str
    name: str  # the JobSet's name on the member
    member_uid: str | None
    attempts: int
    jobset: dict[str, Any] | None  # what to apply; None for a deletion or a refusal
    overrides: tuple[str, ...] = ()  # the override rules that rewrote `jobset`, in order
    refused: str | None = None  # why an override rule makes the JobSet one the broker cannot send


@dataclass
class Changes:
    """What a step did that other loops care about."""

    requeued: set[int] = field(default_factory=set)  # jobs back in their queue: wake the scheduler
    freed: bool = False  # capacity returned to the snapshot: wake the scheduler
    dispatch: bool = False  # new member work: wake the dispatcher
    # copies applied to a member removed meanwhile (their uids in `member_uid`): no placement names them any more, so
    # the dispatcher that made them deletes them
    orphans: list[Work] = field(default_factory=list)

    def add(self, other: Changes) -> Changes:
        self.requeued |= other.requeued
        self.freed |= other.freed
        self.dispatch |= other.dispatch
        self.orphans += other.orphans
        return self

    def wake(self, wake: Callable[[str], None]) -> None:
        """Run at once the loops these changes give work to."""
        if self.requeued or self.freed:
            wake("scheduler")
        if self.dispatch:
            wake("dispatcher")


def due_work(session: Session, now: datetime, cluster_ids: Iterable[int], limit: int = 1000) -> list[Work]:
    """Placements with member work due on the given clusters, oldest first. Each job's manifest is read
    once however many of its parts are due, and each part rendered from it copies only that part."""
    rows = session.execute(
        select(Placement, Job.namespace, Job.name)
        .join(Job, Job.id == Placement.job_id)
        .where(Placement.state.in_(WORK_STATES), Placement.cluster_id.in_(list(cluster_ids)),
               or_(Placement.next_attempt_at.is_(None), Placement.next_attempt_at <= now))
        .order_by(Placement.id).limit(limit)).all()
    applied = sorted({placement.job_id for placement, _, _ in rows if placement.state != "Deleting"})
    manifests: dict[int, Any] = {}
    for chunk in in_chunks(applied):
        manifests.update(session.execute(select(Job.id, Job.manifest).where(Job.id.in_(chunk))).all())
    rules, labels = (stored_rules(session), cluster_labels(session)) if applied else ([], {})
    work = []
    for placement, namespace, name in rows:
        item = Work(placement.id, placement.job_id, placement.cluster_id, placement.cluster_name, placement.state,
                    namespace, member_name(name, placement.part), placement.member_uid, placement.attempts, None)
        if placement.state != "Deleting":
            item = _rendered(item, placement, manifests[placement.job_id], rules,
                             labels.get(placement.cluster_name, {}))
        work.append(item)
    return work


def _rendered(work: Work, placement: Placement, manifest: Any, rules: list, labels: dict[str, str]) -> Work:
    """The work with the JobSet its member is sent: the tenant's part, rewritten by the cluster's override
    rules, then stamped with the broker's labels and node pins; or refused, naming the rule."""
    jobset = member_copy(manifest, namespace=work.namespace, part=placement.part)
    try:
        jobset, applied = apply_overrides(rules, placement.cluster_name, labels, jobset)
    except OverrideError as exc:
        return replace(work, refused=str(exc))
    return replace(work, overrides=applied, jobset=stamp(
        jobset, job_id=placement.job_id, placement_id=placement.id, generation=placement.generation,
        part=placement.part, assignments=placement.assignments))


def kept_placements(session: Session, placement_ids: Iterable[int]) -> set[int]:
    """Those of these placements whose member copy the broker still owns; a copy of any other is stale.

    Whatever cluster row a placement names: a copy is never deleted while its placement is kept."""
    ids = sorted(set(placement_ids))
    kept: set[int] = set()
    for chunk in in_chunks(ids):
        kept.update(session.scalars(select(Placement.id).where(Placement.id.in_(chunk),
                                                               Placement.state.in_(KEPT_STATES))))
    return kept


# A locked read gives the row as locked, even to an object the session loaded before the lock (e.g. fail-over's
# targets, read unlocked): the ORM keeps an object's loaded state otherwise, and on PostgreSQL another writer may
# have changed the row between the two reads — a placement another replica had moved on would be acted on as it was.
_AS_LOCKED = {"populate_existing": True}


def lock_jobs(session: Session, job_ids: Iterable[int]) -> None:
    """Lock these jobs and all their placements, in two queries a chunk (ids ascending, the order
    the single steps lock in), and keep them for the rest of the transaction: the steps of a batch
    then find their rows there instead of querying (and locking) them one placement at a time."""
    locked = _Locked()
    ids = sorted(set(job_ids))
    for chunk in in_chunks(ids):
        locked.jobs.update((job.id, job) for job in session.scalars(
            select(Job).where(Job.id.in_(chunk)).order_by(Job.id).with_for_update(), execution_options=_AS_LOCKED))
        for placement in session.scalars(select(Placement).where(Placement.job_id.in_(chunk))
                                         .order_by(Placement.id).with_for_update(), execution_options=_AS_LOCKED):
            locked.placements[placement.id] = placement
            locked.by_job.setdefault(placement.job_id, []).append(placement)
    session.info[LOCKED] = locked


def lock_job_rows(session: Session, job_ids: Iterable[int]) -> None:
    """Lock these jobs' rows (not their placements), ids ascending, before a write that changes their placements
    without reading them first: such a write that took a placement first could wait for a transaction that holds
    its job and waits for a row the write holds, and PostgreSQL would abort one of the two. (SQLite locks the
    whole database: no statement.)"""
    if session.get_bind().dialect.name != "postgresql":
        return
    for chunk in in_chunks(sorted(set(job_ids))):
        session.execute(select(Job.id).where(Job.id.in_(chunk)).order_by(Job.id).with_for_update())


@dataclass
class _Locked:
    jobs: dict[int, Job] = field(default_factory=dict)
    placements: dict[int, Placement] = field(default_factory=dict)
    by_job: dict[int, list[Placement]] = field(default_factory=dict)  # each in id order


def placement_owner(session: Session, placement_id: int) -> tuple[int, str] | None:
    """(job id, state) of a placement, to judge a copy found where a new one is to go."""
    row = session.execute(select(Placement.job_id, Placement.state).where(Placement.id == placement_id)).first()
    return (row.job_id, row.state) if row else None


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
    job = _lock_job(session, work.job_id)
    placement = _lock_placement(session, work.placement_id)
    if placement is None or placement.cluster_id != work.cluster_id:  # its member was removed while the call ran
        events.record(session, "cluster", work.cluster, "CopyOrphaned",
                      f"{work.namespace}/{work.name} (placement {work.placement_id}) was applied as the member was "
                      f"being removed: the dispatcher deletes it", warning=True)
        return Changes(orphans=[replace(work, member_uid=jobset["metadata"]["uid"])])
    if job is None or placement.state != "Applying":
        return Changes()  # cancelled or failed over meanwhile: its Deleting step removes the copy
    status = member_status(jobset)
    seen = placement.status or {}
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
    _job_event(session, job, "Applied", f"{verb} {what} on {work.cluster} (placement {placement.id}, "
                                        f"generation {placement.generation}{rewritten})")
    return _follow_status(session, job, placement, status, now)


def retry_later(session: Session, work: Work, error: str, delay: float, now: datetime) -> None:
    """The member could not do it now (timeout, 5xx, 429, a copy still in the way): try again later."""
    placement = _lock_placement(session, work.placement_id)
    if placement is None or placement.state != work.state:
        return
    if placement.last_error != error:
        job = session.get(Job, work.job_id)
        _job_event(session, job, "MemberRetrying", f"{work.cluster}: {error}; retrying", warning=True)
    placement.attempts += 1
    placement.last_error = error
    placement.next_attempt_at = now + timedelta(seconds=delay)


def fail_apply(session: Session, work: Work, error: str, now: datetime) -> Changes:
    """The member refused the JobSet for good (invalid, forbidden), or an override rule would make it invalid
    (`work.refused`, before any member call): the placement and the job fail."""
    job = _lock_job(session, work.job_id)
    placement = _lock_placement(session, work.placement_id)
    if job is None or placement is None or placement.state != work.state:
        return Changes()
    placement.state, placement.finished_at, placement.last_error = "Failed", now, error
    reason, why = ("OverrideFailed", f"{error}, on {work.cluster}") if work.refused else \
        ("ApplyFailed", f"{work.cluster} refused the JobSet: {error}")
    _job_event(session, job, reason, why, warning=True)
    if job.state not in JOB_FINISHED_STATES and job.cancel_requested_at is None:
        _finish_job(session, job, "Failed", why, now)
    return settle_job(session, job.id, now).add(Changes(freed=True))


# Delete ------------------------------------------------------------------------------------------

def finish_delete(session: Session, work: Work, now: datetime) -> Changes:
    """Deleting → Deleted: the member copy is gone."""
    job = _lock_job(session, work.job_id)
    placement = _lock_placement(session, work.placement_id)
    if job is None or placement is None or placement.state != "Deleting":
        return Changes()
    placement.state, placement.finished_at, placement.next_attempt_at = "Deleted", now, None
    _job_event(session, job, "Deleted", f"deleted {work.namespace}/{work.name} from {work.cluster}")
    return settle_job(session, job.id, now).add(Changes(freed=True))


def _cancelled_with_work(session: Session) -> list[int]:
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
    job_ids = _cancelled_with_work(session)
    lock_jobs(session, job_ids)
    for job_id in job_ids:
        changes.add(settle_job(session, job_id, now))
    return changes


# Status from the members --------------------------------------------------------------------------

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
    job = _lock_job(session, row.job_id)
    placement = _lock_placement(session, placement_id)
    status = member_status(jobset)
    if placement.state == "Applying" and not deleted:
        if newer(status, placement.status):  # seen before the dispatcher records the apply: kept for it
            placement.status = status
        return Changes()
    if placement.state not in ON_MEMBER_STATES + VERDICT_STATES or status["uid"] != placement.member_uid:
        return Changes()  # being deleted, or another copy: nothing to learn
    if placement.state in VERDICT_STATES:
        if deleted or not newer(status, placement.status):
            return Changes()
        # the verdict stands; counts that lagged it refine what the placement and its job show
        placement.status = {**status, "appliedGeneration": placement.status.get("appliedGeneration")}
        return settle_job(session, job.id, now)
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
    return _follow_status(session, job, placement, status, now)


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
        job = _lock_job(session, job_id)
        placement = _lock_placement(session, placement_id)
        if placement.state in ON_MEMBER_STATES and placement.member_uid == uid:
            changes.add(_drifted(session, job, placement, f"{_where(job, placement)} was deleted on "
                                                          f"{placement.cluster_name} by someone else", now))
    return changes


def _part_where(placement: Placement) -> str:
    """`shard-a on eu-west`, or `on eu-west` for a whole JobSet."""
    return f"{placement.part + ' ' if placement.part else ''}on {placement.cluster_name}"


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
        _job_event(session, job, "Drift", f"{message}; applying it again", warning=True)
        return Changes(dispatch=True)
    placement.state, placement.finished_at = "Deleted", now
    _job_event(session, job, "Drift", message, warning=True)
    return settle_job(session, job.id, now)


def _follow_status(session: Session, job: Job, placement: Placement, status: dict[str, Any],
                   now: datetime) -> Changes:
    """A placement's new member status: its state, and for a failed split part, restart or fail."""
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
            where = _part_where(placement)
            if state == "Succeeded":
                _job_event(session, job, "PartSucceeded" if placement.part else "MemberSucceeded",
                           f"{where} completed")
            else:
                _job_event(session, job, "PartFailed" if placement.part else "MemberFailed",
                           f"{where} failed: {failure_message(status)}", warning=True)
        if state == "Failed" and placement.part and job.state not in JOB_FINISHED_STATES \
                and job.cancel_requested_at is None:
            decision = part_failure(Policy.of(job.manifest, job.placement_mode), placement.part, job.restart_count)
            if decision.restart:
                job.restart_count += int(decision.counted)
                changes.requeued.add(job.id)
                _requeue(session, job, decision.message, "PartRestarting")
            else:
                _finish_job(session, job, "Failed", decision.message, now)
    return changes.add(settle_job(session, job.id, now))


# The job from its placements ---------------------------------------------------------------------

def settle_job(session: Session, job_id: int, now: datetime) -> Changes:
    """Bring the job in line with its placements (call after any placement change)."""
    job = _lock_job(session, job_id)
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
            _finish_job(session, job, "Cancelled", "cancelled; removed from every member", now)
        return changes
    if job.placement_mode == "whole":
        job.restart_count = result.status["restarts"]
    if result.state is not None:
        _finish_job(session, job, result.state, result.message, now)
        return changes.add(settle_job(session, job_id, now))
    if job.state in PLACED_JOB_STATES and not live:
        # every part with a verdict was settled above: what is left ended without one (deleted, lost
        # with its member), and only those parts are placed again
        lost = [p for p in current.values() if p.state not in VERDICT_STATES]
        _requeue(session, job, "; ".join(f"{_part_where(p)}: {p.last_error or 'deleted'}" for p in lost))
        changes.requeued.add(job.id)
    elif job.state in DISPATCHING_JOB_STATES and current and \
            all(p.state in ("Starting", "Running", "Succeeded") for p in current.values()):
        clusters = ", ".join(sorted({p.cluster_name for p in current.values()}))
        if all(p.state in ("Running", "Succeeded") for p in current.values()):
            job.state, job.reason = "Running", None
            job.started_at = job.started_at or now
            _job_event(session, job, "Running", f"every pod ready on {clusters}")
        elif job.state != "Starting":
            job.state, job.reason = "Starting", f"on {clusters}; waiting for its pods to be ready"
            _job_event(session, job, "Starting", job.reason)
    return changes


def _finish_job(session: Session, job: Job, state: str, message: str, now: datetime) -> None:
    job.state, job.finished_at, job.reason = state, now, message
    _job_event(session, job, state, message, warning=state == "Failed")


def _requeue(session: Session, job: Job, message: str, reason: str = "Requeued") -> None:
    job.state, job.reason, job.admitted_at = "Queued", message, None
    _job_event(session, job, reason, f"{message}; back in its queue")


# Recovery ----------------------------------------------------------------------------------------

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
    return bool(_cancelled_with_work(session)) or bool(_fail_over_targets(session, now, toleration))


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
        job = _lock_job(session, placement.job_id)
        placement = _lock_placement(session, placement.id)
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
            _requeue(session, job, f"{_part_where(placement)}: {message}", "FailedOver")
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
    job = _lock_job(session, unready.job_id)
    placement = _lock_placement(session, unready.placement_id)
    if job is None or placement is None or placement.state != "Starting" or job.cancel_requested_at is not None \
            or job.state in JOB_FINISHED_STATES:
        return Changes()  # ready, moved or cancelled meanwhile
    why = (f"{_part_where(placement)}: pods not all ready within {unready.timeout:.0f}s "
           f"({not_ready(placement.status)}{'; ' + pods if pods else ''})")
    job.evictions += 1
    _job_event(session, job, "Evicted", why, warning=True)
    for other in session.scalars(select(Placement).where(Placement.job_id == job.id,
                                                         Placement.state.in_(PLACEMENT_ACTIVE_STATES))
                                 .with_for_update()):
        other.state, other.last_error, other.next_attempt_at = "Deleting", why, None
    if job.evictions >= policy.eviction_limit:
        _finish_job(session, job, "Failed", f"evicted {job.evictions} times, the last: {why}", now)
    else:
        delay = min(policy.backoff * 2 ** (job.evictions - 1), policy.backoff_cap)
        until = now + timedelta(seconds=policy.avoid)
        job.requeue_at = now + timedelta(seconds=delay)
        job.avoid = {**{c: t for c, t in (job.avoid or {}).items() if datetime.fromisoformat(t) > now},
                     placement.cluster_name: until.isoformat()}
        _requeue(session, job, f"evicted ({job.evictions} of {policy.eviction_limit}): placed again after "
                               f"{delay:.0f}s, not on {placement.cluster_name} until {until:%H:%M:%S} UTC")
    return settle_job(session, job.id, now).add(Changes(dispatch=True, freed=True))


def _not_ready_since(session: Session, cluster: Cluster) -> datetime | None:
    moment = session.scalar(select(func.max(Event.time)).where(Event.kind == "cluster",
                                                              Event.object_id == cluster.name,
                                                              Event.reason == "MemberNotReady"))
    return as_utc(moment) if moment else None


# helpers -----------------------------------------------------------------------------------------

def _lock_job(session: Session, job_id: int) -> Job | None:
    locked = session.info.get(LOCKED)
    if locked is not None and job_id in locked.jobs:
        return locked.jobs[job_id]
    return session.scalar(select(Job).where(Job.id == job_id).with_for_update(), execution_options=_AS_LOCKED)


def _lock_placement(session: Session, placement_id: int) -> Placement | None:
    locked = session.info.get(LOCKED)
    if locked is not None and placement_id in locked.placements:
        return locked.placements[placement_id]
    return session.scalar(select(Placement).where(Placement.id == placement_id).with_for_update(),
                          execution_options=_AS_LOCKED)


def _job_event(session: Session, job: Job, reason: str, message: str, *, warning: bool = False) -> None:
    events.record(session, "job", job.id, reason, message, warning=warning, tenant_id=job.tenant_id)
