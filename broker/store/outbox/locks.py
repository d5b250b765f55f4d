"""How an outbox transaction locks the rows it changes: jobs, then their placements, ids ascending, as every batch
locks them, so that two batches never wait for each other in a cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.store.db.models import Job, Placement
from broker.store.db.session import in_chunks


LOCKED = "archipelago.locked"  # session.info key: the rows `lock_jobs` holds for this transaction


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


def lock_job(session: Session, job_id: int) -> Job | None:
    locked = session.info.get(LOCKED)
    if locked is not None and job_id in locked.jobs:
        return locked.jobs[job_id]
    return session.scalar(select(Job).where(Job.id == job_id).with_for_update(), execution_options=_AS_LOCKED)


def lock_placement(session: Session, placement_id: int) -> Placement | None:
    locked = session.info.get(LOCKED)
    if locked is not None and placement_id in locked.placements:
        return locked.placements[placement_id]
    return session.scalar(select(Placement).where(Placement.id == placement_id).with_for_update(),
                          execution_options=_AS_LOCKED)
