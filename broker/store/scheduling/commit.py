"""Phase 3, the commit: a cycle's decisions a slice of jobs per transaction, each fenced on the one before, then the
waiting jobs' reasons that changed, a slice per transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any, Mapping, Sequence

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from broker.engine.jobset import ON_PREEMPTION_ANNOTATION
from broker.engine.placement import CycleResult, Placement, Preemption, Waiting
from broker.store.db.models import (JOB_FINISHED_STATES, PLACEMENT_ACTIVE_STATES, Event, Job, JsonText,
                                    Placement as PlacementRow, by_reason)
from broker.store.db.runtime import Database, WriteSlices, write_in_slices
from broker.store.db.session import in_chunks
from broker.store.outbox import lock_job_rows
from broker.store.scheduling.records import SCHEDULER_LOCK_KEY, CommitOutcome, Inventory, reasons_digest, victim_words


def _lock_for_commit(session: Session) -> None:
    """Serialise schedulers' commits: the PostgreSQL advisory lock (on SQLite, `Database.write` holds the write lock
    from its BEGIN)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEDULER_LOCK_KEY})")


@dataclass(frozen=True, slots=True)
class Decisions:
    """Some jobs' decisions out of a cycle's (`CycleResult`): their placements and the preemptions that make room."""

    placements: tuple[Placement, ...]
    preemptions: tuple[Preemption, ...]


def decisions_by_job(result: CycleResult) -> list[Decisions]:
    """A cycle's decisions per placed job, in the order it decided them: each job with the preemptions it needs."""
    preemptions: dict[str, list[Preemption]] = {}
    for preemption in result.preemptions:
        preemptions.setdefault(preemption.preemptor, []).append(preemption)
    placements: dict[str, list[Placement]] = {}
    for placement in result.placements:
        placements.setdefault(placement.job_id, []).append(placement)
    return [Decisions(tuple(placed), tuple(preemptions.get(job_id, ()))) for job_id, placed in placements.items()]


def commit_decisions(session: Session, inventory: Inventory, decisions: Decisions, fence: int) -> CommitOutcome:
    """Write some jobs' decisions of a cycle in a fresh `Database.write()` session, which commits them.

    1. Take the commit lock; drop everything if another scheduler placed anything since (the newest placement id
       is not `fence`: the read's, or what the slice before left, `commit_cycle`).
    2. Lock the jobs it admits and preempts, ids ascending, before any of their placements, as every batch locks
       them (`lock_job_rows`); admit each placed job still Queued as read, with a conditional UPDATE (`_admit`);
       only admitted jobs get placements.
    3. Insert their placements (state Decided, next generation per job and part).
    4. Mark the live placements their admission preempts Deleting.
    5. One event per admitted job and per preempted job.
    The waiting jobs' reasons follow in transactions of their own (`write_reasons`).
    """
    outcome = CommitOutcome()
    _lock_for_commit(session)
    if (session.scalar(select(func.max(PlacementRow.id))) or 0) != fence:
        outcome.stale = True
        return outcome
    outcome.fence = fence
    now = datetime.now(timezone.utc)
    events: list[dict[str, Any]] = []

    by_job: dict[str, list[Placement]] = {}
    for placement in decisions.placements:
        by_job.setdefault(placement.job_id, []).append(placement)
    lock_job_rows(session, [int(job_id) for job_id in (*by_job, *(p.job_id for p in decisions.preemptions))])
    admitted = _admit(session, inventory, [int(j) for j in by_job], now)
    outcome.admitted = sorted(admitted)
    outcome.dropped = sorted(int(j) for j in by_job if int(j) not in admitted)

    victims: dict[str, dict[str, str]] = {}  # preemptor -> victim job id -> rule
    for preemption in decisions.preemptions:
        victims.setdefault(preemption.preemptor, {})[preemption.job_id] = preemption.rule
    rows = []
    for job_id, placements in by_job.items():
        if int(job_id) not in admitted:
            continue
        for placement in placements:
            rows.append(_placement_row(placement, inventory, now))
        events.append(_event(job_id, "Admitted", _placed_message(placements) + _preempting(
            inventory, victims.get(job_id, {})), inventory.records[job_id].tenant_id, now))
    if rows:
        session.execute(insert(PlacementRow.__table__), rows)
        outcome.fence = session.scalar(select(func.max(PlacementRow.id)))
    outcome.placements = len(rows)

    preempted: dict[str, str] = {}
    for preemption in decisions.preemptions:
        if int(preemption.preemptor) not in admitted:
            continue
        marked = session.execute(
            update(PlacementRow)
            .where(PlacementRow.job_id == int(preemption.job_id), PlacementRow.part == (preemption.part or ""),
                   PlacementRow.cluster_name == preemption.cluster, PlacementRow.state.in_(PLACEMENT_ACTIVE_STATES))
            .values(state="Deleting", last_error=preemption.message)
            .execution_options(synchronize_session=False)).rowcount
        outcome.preempted += marked
        if marked:
            preempted[preemption.job_id] = preemption.message
    for job_id, message in preempted.items():
        events.append(_event(job_id, "Preempted", message, inventory.tenant_ids.get(job_id), now, warning=True))
    events += _fail_on_preemption(session, preempted, inventory, now)

    if events:
        session.execute(insert(Event.__table__), events)
    return outcome


# Waiting reasons written per transaction, at most: a new leader's first cycle over 100,000 pending jobs rewrites
# nearly all of them, and one transaction would hold SQLite's write lock from every submission for seconds (1,000 a
# slice held it 92 ms typically, 740 ms at p99, in bench/leader_api.py; a submission waits for at most one loop
# transaction). Fewer where they take longer than `WriteSlices.budget`.
REASONS_PER_TRANSACTION = 200


# Jobs whose decisions are committed per transaction, at most: a new leader's first cycle admits thousands at once
# (2,000 held SQLite's write lock 130 ms in bench/leader_api.py, every submission waiting; over more capacity, longer).
# Fewer where they take longer than `WriteSlices.budget`.
JOBS_PER_TRANSACTION = 500


def commit_cycle(database: Database, inventory: Inventory, result: CycleResult) -> CommitOutcome:
    """The decisions, a slice of jobs per transaction in the order the cycle decided them (`commit_decisions`, each
    fenced on what the slice before left), then the reasons that changed, a slice per transaction. A slice finding
    that another scheduler committed since drops itself and the rest: the outcome is `stale`, with what the slices
    before it committed. At least one transaction: a cycle that placed nothing still learns whether it is stale."""
    outcome, jobs = CommitOutcome(fence=inventory.fence), decisions_by_job(result)
    slices, start = WriteSlices(most=JOBS_PER_TRANSACTION), 0
    while True:
        taken = jobs[start:start + slices.size]
        decisions = Decisions(tuple(p for job in taken for p in job.placements),
                              tuple(p for job in taken for p in job.preemptions))
        with database.write() as session, slices.timed(len(taken)):
            committed = commit_decisions(session, inventory, decisions, outcome.fence)
        if committed.stale:
            outcome.stale = True
            return outcome
        outcome.add(committed)
        start += len(taken)
        if start >= len(jobs):
            break
    outcome.changed = changed_reasons(inventory, result)
    write_in_slices(database, outcome.changed, most=REASONS_PER_TRANSACTION,
                    write=lambda session, written: write_reasons(session, inventory, written))
    return outcome


def changed_reasons(inventory: Inventory, result: CycleResult) -> list[Waiting]:
    """The waiting jobs whose reasons differ from those stored: the only ones written. Ids ascending, so that each
    slice `commit_cycle` writes is rows that sit together in the table (in the cycle's order of decisions, each
    slice of 200 touched pages all over it, and committing them took four times as long)."""
    digests: dict[int, int] = {}
    changed = [waiting for waiting in [*result.waiting.values(), *inventory.unplaceable.values()]
               if waiting.message != inventory.records[waiting.job_id].reason
               or reasons_digest(waiting.clusters, digests) != inventory.records[waiting.job_id].reasons_digest]
    changed.sort(key=lambda waiting: int(waiting.job_id))
    return changed


def write_reasons(session: Session, inventory: Inventory, changed: Sequence[Waiting]) -> None:
    """Store these jobs' reasons (those still Queued), with a Waiting event for each whose cause changed
    (`PendingRecord.news`).
    After the decisions' commit, in slices of `REASONS_PER_TRANSACTION`: a reason is what one cycle saw, and the
    next one writes it again if it was lost. Rows ids ascending, the order every batch locks jobs in: in the cycle's
    order of decisions, a slice and a batch that lock two of them could each hold what the other waits for."""
    now = datetime.now(timezone.utc)
    jobs = Job.__table__
    stored: dict[int, str] = {}  # each reasons mapping as stored and encoded, once (jobs of a shape share one)
    rows = []
    for w in changed:
        if id(w.clusters) not in stored:
            stored[id(w.clusters)] = json.dumps(by_reason(w.clusters))
        rows.append({"job_id": int(w.job_id), "new_reason": w.message, "new_reasons": stored[id(w.clusters)]})
    rows.sort(key=itemgetter("job_id"))
    session.execute(update(jobs).where(jobs.c.id == bindparam("job_id"), jobs.c.state == "Queued")
                    .values(reason=bindparam("new_reason"), waiting_reasons=bindparam("new_reasons", type_=JsonText)),
                    rows)
    events = [_event(w.job_id, "Waiting", w.message, inventory.records[w.job_id].tenant_id, now)
              for w in changed if inventory.records[w.job_id].news(w)]
    if events:
        session.execute(insert(Event.__table__), events)


def _fail_on_preemption(session: Session, preempted: Mapping[str, str], inventory: Inventory,
                        now: datetime) -> list[dict[str, Any]]:
    """Fail the preempted jobs that asked for it (`archipelago.io/on-preemption: fail`); the others go back to
    their queue once their copies are gone. A failed job's copies are deleted as any finished job's are."""
    if not preempted:
        return []
    policy = Job.manifest[("metadata", "annotations", ON_PREEMPTION_ANNOTATION)].as_string()
    failing = [str(job_id) for job_id, in session.execute(
        select(Job.id).where(Job.id.in_([int(j) for j in preempted]), policy == "fail",
                             Job.state.not_in(JOB_FINISHED_STATES)))]
    events = []
    for job_id in failing:
        reason = f"{preempted[job_id]}; failed, as its {ON_PREEMPTION_ANNOTATION} annotation asks"
        session.execute(update(Job).where(Job.id == int(job_id)).values(state="Failed", finished_at=now,
                                                                         reason=reason)
                        .execution_options(synchronize_session=False))
        events.append(_event(job_id, "Failed", reason, inventory.tenant_ids.get(job_id), now, warning=True))
    return events


def _admit(session: Session, inventory: Inventory, job_ids: Sequence[int], now: datetime) -> set[int]:
    """Queued → Admitted for the jobs still Queued and not cancelled, and not requeued since the cycle's read (their
    reason is the one it read: a split job's part that failed meanwhile is requeued with the job still Queued, and
    the cycle placed only the parts it saw lost); returns those it moved. Their rows are locked (`lock_job_rows`)."""
    admitted: set[int] = set()
    for chunk in in_chunks(job_ids):
        chunk = [job_id for job_id, reason in session.execute(select(Job.id, Job.reason).where(Job.id.in_(chunk)))
                 if reason == inventory.records[str(job_id)].reason]
        admitted.update(session.scalars(
            update(Job).where(Job.id.in_(chunk), Job.state == "Queued", Job.cancel_requested_at.is_(None))
            .values(state="Admitted", admitted_at=now, reason=None, waiting_reasons={})
            .returning(Job.id).execution_options(synchronize_session=False)))
    return admitted


def _placement_row(placement: Placement, inventory: Inventory, now: datetime) -> dict[str, Any]:
    part = placement.part or ""
    total: dict[str, int] = {}
    for usage in placement.node_usage.values():
        for resource, amount in usage.items():
            total[resource] = total.get(resource, 0) + amount
    return {
        "job_id": int(placement.job_id), "part": part, "cluster_id": inventory.cluster_ids[placement.cluster],
        "cluster_name": placement.cluster, "hypernode": placement.hypernode, "tier": placement.tier,
        "assignments": [{"node": a.node, "replicatedJob": a.replicated_job, "pods": a.pods}
                        for a in placement.assignments],
        "node_usage": {node: dict(usage) for node, usage in placement.node_usage.items()},
        "exclusive_topology": placement.exclusive_domains[0][0] if placement.exclusive_domains else None,
        "resources": total, "generation": inventory.generations.get((placement.job_id, part), 0) + 1,
        "state": "Decided", "created_at": now,
    }


def _placed_message(placements: list[Placement]) -> str:
    """"placed on eu-west, HyperNode leaf-3 (tier 1)"; one clause per part of a split job."""
    clauses = []
    for p in placements:
        where = f"HyperNode {p.hypernode} (tier {p.tier})" if p.hypernode else "spanning HyperNodes"
        clauses.append(f"{p.part + ' ' if p.part else ''}on {p.cluster}, {where}")
    return "placed " + "; ".join(clauses)


RULE_WORDS = {"WithinQueue": "lower priority, same queue",
              "ReclaimWithinCohort": "borrowed from this queue's nominal quota, reclaimed",
              "FairSharing": "its tenant above its fair share, this one below"}


def _preempting(inventory: Inventory, victims: Mapping[str, str]) -> str:
    """"; preempting job 4 (lower priority, same queue)" — the preemptor's side of its preemptions; a victim of
    another tenant (fair-share preemption) by its priority and size, never its id."""
    if not victims:
        return ""
    return "; preempting " + ", ".join(f"{victim_words(inventory, v, rule)} ({RULE_WORDS[rule]})"
                                       for v, rule in sorted(victims.items()))


def _event(job_id: str, reason: str, message: str, tenant_id: int | None, now: datetime, *,
           warning: bool = False) -> dict[str, Any]:
    return {"kind": "job", "object_id": job_id, "reason": reason, "message": message, "tenant_id": tenant_id,
            "type": "Warning" if warning else "Normal", "time": now}
