"""What member calls came to, recorded: the dispatcher's own, and those a pull member's agent reports (with the
work it is assigned)."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.services.members import backoff
from broker.store.db.models import Job, Placement, Tenant
from broker.store.db.runtime import Database, record_in_turns
from broker.store.outbox import (KEPT_STATES, VERDICT_STATES, Changes, Work, due_work, fail_apply, finish_apply,
                                 finish_delete, lock_jobs, refuse_apply, retry_later, start_apply)
from clusters import jobsets

log = logging.getLogger("archipelago.dispatcher")

# Test hook: the process kills itself (SIGKILL) right after this step, e.g. "applying" (committed,
# member untouched), "applied-on-member" (member has it, not committed), "applied", "deleting"
# (committed, by whichever loop settled the job, member untouched), "deleted-on-member", "deleted".
# Only the crash tests set it.
CRASH_AT_ENV = "ARCHIPELAGO_TEST_CRASH_AT"
RETRY_BASE = 1.0
RETRY_CAP = 60.0
def crash_point(step: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == step:
        log.warning("test hook %s=%s: killing the process", CRASH_AT_ENV, step)
        os.kill(os.getpid(), signal.SIGKILL)


# Outcomes recorded per transaction, at most (fewer where they take longer: `record_in_turns`): the applies that
# finished while the last batch committed come by the hundred on a leader's first dispatch, and one transaction for
# them all held SQLite's write lock from every submission.
OUTCOMES_PER_TRANSACTION = 100


def record_outcomes(database: Database, outcomes: list[Outcome], now: datetime) -> Changes:
    """Every outcome of a batch of member calls (the dispatcher's, or a pull member's agent's), up to
    OUTCOMES_PER_TRANSACTION a transaction (`record_in_turns`), their jobs locked first, one flush at each commit.
    Each step checks the placement is still in the state the call was made in: an outcome recorded twice changes
    nothing the second time."""
    changes = Changes()

    def record(session: Session, o: Outcome) -> None:
        if o.kind == "done" and o.work.deletes:
            changes.add(finish_delete(session, o.work, now))
        elif o.kind == "done":
            changes.add(finish_apply(session, o.work, o.jobset, now, adopted=o.adopted))
        elif o.kind == "refuse" and not o.work.deletes:
            changes.add(refuse_apply(session, o.work, o.error, now))
        elif o.kind == "fail" and not o.work.deletes:  # a deletion is done or retried: it never fails a job
            changes.add(fail_apply(session, o.work, o.error, now))
        else:
            retry_later(session, o.work, o.error, o.delay if o.delay is not None else
                        backoff(o.work.attempts + 1, RETRY_BASE, RETRY_CAP), now)

    record_in_turns(database, outcomes, most=OUTCOMES_PER_TRANSACTION, autoflush=False, record=record,
                    lock=lambda session, batch: lock_jobs(session, (o.work.job_id for o in batch)))
    return changes


@dataclass(frozen=True)
class AssignedWork:
    """A pull member's share of the outbox (`assigned_work`)."""

    work: list[Work]
    kept: list[int]  # the placements whose copies stay on the member
    # namespace → (its labels there, whether the broker may use it although it did not make it): those of the work
    # and those holding kept copies (the broker's: relabelled when their tenant's Pod Security level changes)
    namespaces: dict[str, tuple[dict[str, str], bool]]
    changes: Changes


def assigned_work(database: Database, cluster_id: int, now: datetime) -> AssignedWork:
    """A pull member's share of the outbox, for its agent, as a dispatcher pass would take it: its due work,
    Decided moved to Applying and refusals failed (committed before the agent hears of them, so before its
    member is touched), and the placements whose copies it keeps there: any other copy of the broker's on
    that member is stale (a placement failed over, cancelled, re-placed), and the agent deletes it."""
    with database.read() as session:
        work = due_work(session, now, [cluster_id])
    refused = [w for w in work if w.refused is not None]
    changes = record_outcomes(database, [Outcome(w, "fail", w.refused) for w in refused], now)
    work = [w for w in work if w.refused is None]
    decided = [w for w in work if w.state == "Decided"]
    if decided:
        with database.write() as session:
            started = start_apply(session, decided)
        crash_point("applying")
        work = [replace(w, state="Applying") if w.state == "Decided" else w for w in work
                if w.state != "Decided" or w.placement_id in started]
    with database.read() as session:
        rows = session.execute(select(Placement.id, Job.namespace, Tenant.name, Tenant.pod_security)
                               .join(Job, Job.id == Placement.job_id).join(Tenant, Tenant.id == Job.tenant_id)
                               .where(Placement.cluster_id == cluster_id, Placement.state.in_(KEPT_STATES))).all()
    namespaces = {w.namespace: (w.namespace_labels, w.adoptable) for w in work if not w.deletes}
    for _, namespace, tenant, level in rows:
        namespaces.setdefault(namespace, (jobsets.namespace_labels(tenant, level), True))
    return AssignedWork(work, [row[0] for row in rows], namespaces, changes)


def reported_outcomes(database: Database, cluster_id: int, reports: list[dict[str, Any]], now: datetime) -> Changes:
    """What a pull member's agent did with its work (`action` apply or delete; `kind` done, retry, refuse or fail),
    recorded as the dispatcher records its own calls. A report of another cluster's placement is ignored."""
    with database.read() as session:
        rows = {p.id: (p, namespace, name) for p, namespace, name in session.execute(
            select(Placement, Job.namespace, Job.name).join(Job, Job.id == Placement.job_id)
            .where(Placement.id.in_([r["placement_id"] for r in reports]), Placement.cluster_id == cluster_id))}
    outcomes = []
    for report in reports:
        if report["placement_id"] not in rows:
            continue
        placement, namespace, name = rows[report["placement_id"]]
        state = "Applying" if report["action"] == "apply" else (
            placement.state if placement.state in VERDICT_STATES else "Deleting")
        work = Work(placement.id, placement.job_id, cluster_id, placement.cluster_name, state, namespace,
                    jobsets.member_name(name, placement.part), placement.member_uid, placement.attempts, None)
        outcomes.append(Outcome(work, report["kind"], report.get("error") or "", report.get("delay"),
                                report.get("jobset"), bool(report.get("adopted"))))
    return record_outcomes(database, outcomes, now)


@dataclass(frozen=True)
class Outcome:
    """What a member call came to: done, retry (after `delay`, else back-off), refuse (the member's admission will
    not take the copy: placed elsewhere) or fail (for good)."""

    work: Work
    kind: str
    error: str = ""
    delay: float | None = None
    jobset: dict | None = None
    adopted: bool = False
