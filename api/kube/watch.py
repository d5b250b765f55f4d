"""Watching JobSets: the event log read forward from a resourceVersion, each touched job sent as it is now.

The event log is the change feed: every change of a job writes an event in the same transaction. A watch
reads the events after its resourceVersion, and again those of the last COMMIT_SLACK it has not seen
(a transaction may commit an older id after a newer one), and sends each touched job in its scope once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.kube.objects import COMMIT_SLACK, render, shown
from api.kube.resource import API_VERSION, KIND
from broker.store.db.models import Event, Job, utcnow
from broker.store.tenancy import Principal

BATCH = 500


@dataclass
class Scope:
    """Which jobs a request is about: the caller's, in a namespace (or all it may see), matching selectors."""

    principal: Principal
    namespaces: list[str] | None  # None: any (an admin at the cluster scope)
    matches: Callable[[dict[str, Any]], bool]  # over a rendered JobSet: label and field selectors

    def holds(self, job: Job) -> bool:
        return self.principal.may_see(job.tenant_id) and (self.namespaces is None or job.namespace in self.namespaces)


@dataclass
class EventCursor:
    """Where a watch is in the event log: every id at or below `floor` was handled (the resourceVersion it
    started from), and so were the ids in `seen` above it (kept for COMMIT_SLACK)."""

    floor: int
    high: int = 0
    seen: dict[int, datetime] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.high = max(self.high, self.floor)

    def changed_jobs(self, session: Session, principal: Principal) -> tuple[list[int], set[int]]:
        """The ids of the jobs with events not handled yet, oldest change first, and which were just created."""
        cutoff = utcnow() - COMMIT_SLACK
        columns = (Event.id, Event.time, Event.kind, Event.object_id, Event.tenant_id, Event.reason)
        fresh = list(session.execute(select(*columns).where(Event.id > self.high).order_by(Event.id).limit(BATCH)))
        late = [row for row in session.execute(select(*columns).where(
            Event.id > self.floor, Event.id <= self.high, Event.time >= cutoff)) if row.id not in self.seen]
        self.seen = {event_id: at for event_id, at in self.seen.items() if at >= cutoff}
        order: dict[int, int] = {}
        created: set[int] = set()
        for row in sorted(late + fresh, key=lambda r: r.id):
            self.seen[row.id] = row.time
            self.high = max(self.high, row.id)
            if row.kind == "job" and principal.may_see(row.tenant_id):
                order.pop(int(row.object_id), None)
                order[int(row.object_id)] = row.id
                if row.reason == "Queued":
                    created.add(int(row.object_id))
        return list(order), created


def changes(session: Session, scope: Scope, cursor: EventCursor) -> list[tuple[str, dict[str, Any]]]:
    """(type, JobSet) for each job in scope that changed since the cursor; DELETED once it is no longer shown."""
    job_ids, created = cursor.changed_jobs(session, scope.principal)
    if not job_ids:
        return []
    jobs = {job.id: job for job in session.scalars(select(Job).where(Job.id.in_(job_ids)))}
    wanted = [jobs[i] for i in job_ids if i in jobs and scope.holds(jobs[i])]
    found = []
    for job, obj in zip(wanted, render(session, wanted)):
        if scope.matches(obj):
            found.append(("DELETED" if not shown(job) else "ADDED" if job.id in created else "MODIFIED", obj))
    return found


def bookmark(resource_version: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": KIND, "apiVersion": API_VERSION,
                                           "metadata": {"resourceVersion": str(resource_version)}}}

