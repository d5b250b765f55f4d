"""Watching JobSets: the event log read forward from a resourceVersion, each touched job sent as it is now.

The event log is the change feed: every change of a job writes an event in the same transaction. A watch
reads the events after its cursor, and the ids it saw skipped for COMMIT_SLACK (a transaction may commit an older id
after a newer one), and sends each touched job in its scope once.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.kube.errors import KubeError
from api.kube.objects import COMMIT_SLACK, render, shown
from api.kube.resource import API_VERSION, KIND
from broker.store.db.models import Event, Job, utcnow
from broker.store.tenancy import Principal

BATCH = 500
MAX_GAPS = 1000  # gaps a cursor looks for at once, the newest kept
_COLUMNS = (Event.id, Event.time, Event.kind, Event.object_id, Event.tenant_id, Event.reason)


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
    started from), and every id up to `high` but those in `gaps`: ids skipped by a later one, which a transaction
    that took its id first may still commit (PostgreSQL), looked for again for COMMIT_SLACK after they were seen
    missing. A poll reads the events after `high` and those gaps, never again what it has handled."""

    floor: int
    high: int = 0
    gaps: list[tuple[int, int, datetime]] = field(default_factory=list)  # (first id, last id, when seen missing)

    def __post_init__(self) -> None:
        self.high = max(self.high, self.floor)

    def changed_jobs(self, session: Session, principal: Principal) -> tuple[list[int], set[int]]:
        """The ids of the jobs with events not handled yet, oldest change first, and which were just created."""
        now = utcnow()
        self.gaps = [gap for gap in self.gaps if gap[2] >= now - COMMIT_SLACK][-MAX_GAPS:]
        fresh = list(session.execute(select(*_COLUMNS).where(Event.id > self.high).order_by(Event.id).limit(BATCH)))
        late = list(session.execute(select(*_COLUMNS).where(
            or_(*(Event.id.between(first, last) for first, last, _ in self.gaps))))) if self.gaps else []
        self._fill(sorted(row.id for row in late))
        for row in fresh:
            if row.id > self.high + 1:
                self.gaps.append((self.high + 1, row.id - 1, now))
            self.high = row.id
        order: dict[int, int] = {}
        created: set[int] = set()
        for row in sorted(late + fresh, key=lambda r: r.id):
            if row.kind == "job" and principal.may_see(row.tenant_id):
                order.pop(int(row.object_id), None)
                order[int(row.object_id)] = row.id
                if row.reason == "Queued":
                    created.add(int(row.object_id))
        return list(order), created

    def _fill(self, found: list[int]) -> None:
        """The gaps without the ids found in them."""
        if not found:
            return
        left = []
        for first, last, since in self.gaps:
            start = first
            for event_id in (i for i in found if first <= i <= last):
                if event_id > start:
                    left.append((start, event_id - 1, since))
                start = event_id + 1
            if start <= last:
                left.append((start, last, since))
        self.gaps = left


class WatchSlots:
    """The watches each token holds open in this process: at most `most` at once (ARCHIPELAGO_MAX_WATCHES_PER_TOKEN),
    so that one tenant cannot make the broker poll without end."""

    def __init__(self) -> None:
        self._held: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def take(self, token: str, most: int) -> Callable[[], None] | None:
        """A slot: the function that gives it back (once, however often it is called); None when the token holds
        `most` already."""
        key = hashlib.sha256(token.encode()).digest()
        with self._lock:
            if self._held.get(key, 0) >= most:
                return None
            self._held[key] = self._held.get(key, 0) + 1
        given: list[bool] = []

        def give_back() -> None:
            with self._lock:
                if not given:
                    given.append(True)
                    self._held[key] -= 1
                    if not self._held[key]:
                        del self._held[key]

        return give_back

    def held(self, token: str) -> int:
        with self._lock:
            return self._held.get(hashlib.sha256(token.encode()).digest(), 0)


WATCHES = WatchSlots()  # this process's watches, by token


def watch_slot(token: str, most: int) -> Callable[[], None]:
    """A slot for one more watch of `token` (call what it returns when the watch ends), or 429 when it holds `most`
    open already."""
    give_back = WATCHES.take(token, most)
    if give_back is None:
        raise KubeError(429, f"this token holds {most} watches open already (ARCHIPELAGO_MAX_WATCHES_PER_TOKEN): "
                             "close one, or list instead", headers={"Retry-After": "1"})
    return give_back


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

