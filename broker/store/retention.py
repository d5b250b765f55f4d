"""History has an end: finished jobs (with their placements) and events older than the retention period are
deleted, a bounded batch per transaction, so the tables stop growing and no pass holds the database long."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from broker.store.audit import prune_audit
from broker.store.db.models import JOB_FINISHED_STATES, Event, Job
from broker.store.outbox import lock_job_rows

BATCH = 1000  # rows of a table deleted in one transaction


@dataclass
class Pruned:
    jobs: int = 0
    events: int = 0
    audit: int = 0

    @property
    def full(self) -> bool:
        """A batch was full: more may be left."""
        return BATCH in (self.jobs, self.events, self.audit)


def history_from(now: datetime, retention_days: float) -> datetime | None:
    """The oldest moment whose history is kept; None when history is kept forever (retention 0)."""
    return now - timedelta(days=retention_days) if retention_days else None


def prune_batch(session: Session, before: datetime) -> Pruned:
    """Delete up to BATCH jobs finished before `before` (and their placements), and BATCH events and BATCH audit
    records older than it; the caller commits. A job still live, however old, is never touched."""
    job_ids = session.scalars(select(Job.id).where(Job.state.in_(JOB_FINISHED_STATES), Job.finished_at < before)
                              .order_by(Job.finished_at).limit(BATCH)).all()
    if job_ids:  # their placements go with them (ON DELETE CASCADE), after their jobs, as every batch locks them
        lock_job_rows(session, job_ids)  # a DELETE locks rows in the order it scans them, not ids ascending
        session.execute(delete(Job).where(Job.id.in_(job_ids)))
    event_ids = session.scalars(select(Event.id).where(Event.time < before).order_by(Event.time).limit(BATCH)).all()
    if event_ids:
        session.execute(delete(Event).where(Event.id.in_(event_ids)))
    return Pruned(len(job_ids), len(event_ids), prune_audit(session, before, BATCH))
