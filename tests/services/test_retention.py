"""History has an end: the retention loop deletes finished jobs (with their placements) and events older than
ARCHIPELAGO_RETENTION_DAYS, in bounded transactions, and never a live job however old."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from api.app import create_app
from broker.services.retention import RetentionService
from broker.store import retention
from broker.store.db.models import Event, Job, Placement, Queue, Tenant
from tests.locks import against_a_transaction_locking

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
LONG_AGO, RECENTLY = NOW - timedelta(days=40), NOW - timedelta(days=3)


def _history(db, *, old_finished: int = 1) -> None:
    """`old_finished` jobs that ended 40 days ago, one that ended 3 days ago, one submitted 40 days ago and still
    running; each with a placement and an event at its last change."""
    with db.write() as session:
        tenant = Tenant(name="research", namespaces=["research"])
        queue = Queue(name="training", tenant=tenant)
        jobs = [(f"old-{i}", "Succeeded", LONG_AGO) for i in range(old_finished)]
        jobs += [("recent", "Failed", RECENTLY), ("old-but-running", "Running", None)]
        for name, state, finished in jobs:
            job = Job(tenant=tenant, queue=queue, name=name, namespace="research", manifest={}, state=state,
                      submitted_at=LONG_AGO, finished_at=finished)
            session.add(job)
            session.flush()
            placement_state = "Running" if finished is None else state
            session.add(Placement(job_id=job.id, cluster_name="eu-west", state=placement_state))
            session.add(Event(time=finished or LONG_AGO, kind="job", object_id=str(job.id), reason=state,
                              message=f"{name} {state}"))


def _names(db) -> set[str]:
    with db.sessions() as session:
        return set(session.scalars(select(Job.name)))


def _count(db, table) -> int:
    with db.sessions() as session:
        return session.scalar(select(func.count()).select_from(table))


def test_finished_jobs_and_events_older_than_retention_are_deleted_and_live_jobs_kept(db, settings):
    _history(db)
    pruned = RetentionService(db, settings.model_copy(update={"retention_days": 30}), now=lambda: NOW).run_once()
    assert (pruned.jobs, pruned.events) == (1, 2)  # old-0, and the events of old-0 and old-but-running
    assert _names(db) == {"recent", "old-but-running"}
    assert _count(db, Placement) == 2  # the deleted job's placement went with it
    with db.sessions() as session:
        assert [e.reason for e in session.scalars(select(Event))] == ["Failed"]


def test_a_pass_deletes_in_bounded_batches_until_nothing_old_is_left(db, settings, monkeypatch):
    monkeypatch.setattr(retention, "BATCH", 3)
    _history(db, old_finished=8)
    transactions = []
    service = RetentionService(db, settings.model_copy(update={"retention_days": 30}), now=lambda: NOW)
    original = retention.prune_batch
    monkeypatch.setattr("broker.services.retention.prune_batch",
                        lambda session, before: transactions.append(original(session, before)) or transactions[-1])
    pruned = service.run_once()
    # 8 old jobs and 9 old events (theirs and the running job's), 3 of each per transaction, until one is not full
    assert [(p.jobs, p.events) for p in transactions] == [(3, 3), (3, 3), (2, 3), (0, 0)]
    assert (pruned.jobs, pruned.events) == (8, 9)
    assert _names(db) == {"recent", "old-but-running"}


def test_retention_zero_keeps_everything(db, settings):
    _history(db)
    pruned = RetentionService(db, settings.model_copy(update={"retention_days": 0}), now=lambda: NOW).run_once()
    assert (pruned.jobs, pruned.events) == (0, 0)
    assert len(_names(db)) == 3


@pytest.mark.parametrize("days, expected", [(30, True), (0, False)])
def test_listings_say_how_far_back_history_goes(db, settings, days, expected):
    app = create_app(settings.model_copy(update={"retention_days": days}), db, run_loops=False)
    with TestClient(app) as client:
        headers = {"Authorization": f"Bearer {settings.admin_token}"}
        for path in ("/api/v1/jobs", "/api/v1/events"):
            shown = client.get(path, headers=headers).json()["history_from"]
            if not expected:
                assert shown is None
                continue
            age = datetime.now(timezone.utc) - datetime.fromisoformat(shown)
            assert timedelta(days=30) - timedelta(minutes=5) < age < timedelta(days=30) + timedelta(minutes=5)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_batch_locks_its_jobs_ids_ascending_whatever_order_its_delete_scans_them(db):
    """A member's list locks the jobs of the finished copies it still shows, ids ascending. A DELETE locks rows in
    the order it scans them: here the older job's row was rewritten last (a later tuple), so a scan of the table
    meets it second; deleting in that order against a list holding the older job and asking for the younger, each
    would hold what the other waits for. The batch locks both ids ascending first: it waits, then deletes both."""
    _history(db, old_finished=2)
    with db.write() as session:
        older, younger = session.scalars(select(Job.id).where(Job.name.in_(["old-0", "old-1"])).order_by(Job.id))
        session.execute(text("UPDATE jobs SET reason = 'rewritten' WHERE id = :id"), {"id": older})
    with db.read() as session:
        assert list(session.scalars(text("SELECT id FROM jobs WHERE id IN (:a, :b) ORDER BY ctid"),
                                    {"a": older, "b": younger})) == [younger, older]

    def prune() -> retention.Pruned:
        with db.write() as session:  # the plan a table of many finished jobs gets: a scan in table order
            session.execute(text("SET LOCAL enable_indexscan = off"))
            session.execute(text("SET LOCAL enable_bitmapscan = off"))
            return retention.prune_batch(session, NOW - timedelta(days=30))

    assert against_a_transaction_locking(db, older, younger, prune).jobs == 2
    assert _names(db) == {"recent", "old-but-running"}
