"""What the forecast reads and writes: the runtimes learned from finished jobs, the facts of each waiting and
running job's runtime, and each waiting job's `jobs.forecast` (DESIGN: when will it start)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from sqlalchemy import bindparam, null, select, update
from sqlalchemy.orm import Session

from broker.engine.forecast import Expected, Runtime, expected_runtime, learned, trusted
from broker.store.db.models import Job, JsonText, Queue, Tenant
from broker.store.db.runtime import Database, write_in_slices
from clusters.rules.times import rfc3339

LEARN_FROM_DAYS = 30  # finished jobs older than this teach nothing: the work and the fleet have changed since
LEARN_FROM_JOBS = 5_000  # the most recent finished jobs read per pass
FORECASTS_PER_TRANSACTION = 500


@dataclass(frozen=True, slots=True)
class Learned:
    """What finished jobs taught: runtimes (newest first) by kind — queue and placement record, which jobs of one
    template share — and each tenant's (declared, actual) runtimes."""

    by_kind: Mapping[tuple[int, str | None], list[float]]
    declarations: Mapping[int, list[tuple[float, float]]]


def learn(session: Session, now: datetime, *, declared_only: bool = False) -> Learned:
    """`declared_only`: the tenants' declarations alone (what trust reads), not the placement records' texts."""
    rows = session.execute(
        select(Job.queue_id, Job.tenant_id, null() if declared_only else Job.placement_spec, Job.started_at,
               Job.finished_at, Job.declared_runtime)
        .where(Job.state == "Succeeded", Job.started_at.is_not(None), Job.finished_at.is_not(None),
               Job.finished_at >= now - timedelta(days=LEARN_FROM_DAYS),
               *([Job.declared_runtime.is_not(None)] if declared_only else []))
        .order_by(Job.finished_at.desc()).limit(LEARN_FROM_JOBS))
    by_kind: dict[tuple[int, str | None], list[float]] = {}
    declarations: dict[int, list[tuple[float, float]]] = {}
    for queue_id, tenant_id, record, started, finished, declared in rows:
        actual = max(0.0, (finished - started).total_seconds())
        by_kind.setdefault((queue_id, record), []).append(actual)
        if declared is not None:
            declarations.setdefault(tenant_id, []).append((declared, actual))
    return Learned(by_kind, declarations)


def untrusted_tenants(session: Session, now: datetime) -> frozenset[str]:
    """The tenants whose recent declared runtimes ran over too often (`trusted`): the scheduler lets none of their
    jobs backfill on held nodes."""
    untrusted = [tenant_id for tenant_id, pairs in learn(session, now, declared_only=True).declarations.items()
                 if not trusted(pairs)]
    if not untrusted:
        return frozenset()
    return frozenset(session.scalars(select(Tenant.name).where(Tenant.id.in_(untrusted))))


@dataclass(frozen=True, slots=True)
class RuntimeFacts:
    """What one job's expected runtime is made of (`expected_runtime`)."""

    tenant_id: int
    queue_id: int
    record: str | None
    declared: float | None
    bound: float | None


def runtime_facts(session: Session, job_ids: Iterable[int]) -> dict[str, RuntimeFacts]:
    ids = sorted(set(job_ids))
    facts: dict[str, RuntimeFacts] = {}
    for start in range(0, len(ids), 10_000):  # bound the IN list
        for row in session.execute(select(Job.id, Job.tenant_id, Job.queue_id, Job.placement_spec,
                                          Job.declared_runtime, Job.runtime_bound)
                                   .where(Job.id.in_(ids[start:start + 10_000]))):
            facts[str(row.id)] = RuntimeFacts(row.tenant_id, row.queue_id, row.placement_spec,
                                              row.declared_runtime, row.runtime_bound)
    return facts


def queue_defaults(session: Session) -> dict[int, float]:
    return {queue_id: seconds for queue_id, seconds in session.execute(
        select(Queue.id, Queue.default_runtime).where(Queue.default_runtime.is_not(None)))}


def runtimes(facts: Mapping[str, RuntimeFacts], taught: Learned, defaults: Mapping[int, float],
             default: float) -> dict[str, Runtime]:
    """Each job's expected runtime, by the rules of `broker.engine.forecast.runtime`."""
    trust = {tenant: trusted(pairs) for tenant, pairs in taught.declarations.items()}
    learnt: dict[tuple[int, str | None], float | None] = {}
    out = {}
    for job_id, f in facts.items():
        kind = (f.queue_id, f.record)
        if kind not in learnt:
            learnt[kind] = learned(taught.by_kind.get(kind, ()))
        out[job_id] = expected_runtime(declared=f.declared, bound=f.bound, learnt=learnt[kind],
                                       queue_default=defaults.get(f.queue_id), default=default,
                                       declarations_trusted=trust.get(f.tenant_id, True))
    return out


def write_forecasts(database: Database, expected: Mapping[str, Expected], runtimes_: Mapping[str, Runtime], now: datetime,
                    cleared: Iterable[str] = ()) -> int:
    """Store each waiting job's forecast (and clear those of `cleared`: no longer forecast), a slice of jobs per
    transaction, the jobs still Queued only; returns how many were written."""
    rows = [{"job_id": int(job_id), "value": json.dumps(stored_forecast(e, runtimes_.get(job_id), now))}
            for job_id, e in expected.items()]
    rows += [{"job_id": int(job_id), "value": None} for job_id in cleared if job_id not in expected]
    rows.sort(key=lambda row: row["job_id"])
    statement = (update(Job.__table__).where(Job.__table__.c.id == bindparam("job_id"),
                                             Job.__table__.c.state == "Queued")
                 .values(forecast=bindparam("value", type_=JsonText)))
    write_in_slices(database, rows, most=FORECASTS_PER_TRANSACTION,
                    write=lambda session, slice_: session.execute(statement, slice_))
    return len(rows)


def stored_forecast(e: Expected, runtime: Runtime | None, now: datetime) -> dict[str, Any]:
    """A forecast as `jobs.forecast` keeps it and the API reads it (`api.views.expected_words`)."""
    stored: dict[str, Any] = {"at": rfc3339(now)}
    if e.start is not None:
        stored |= {"start": rfc3339(e.start), "cluster": e.cluster, "hypernode": e.hypernode, "after": list(e.after)}
    elif e.never:
        stored["never"] = True
    else:
        stored["later_than"] = rfc3339(e.later_than)
    if runtime is not None:
        stored |= {"runtime": runtime.seconds, "runtime_source": runtime.source}
    return stored

