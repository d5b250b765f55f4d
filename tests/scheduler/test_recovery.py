"""A crash between decision and commit loses nothing, and no job is ever placed twice."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone

import pytest
from sqlalchemy import event, select

from broker.engine.placement import schedule
from broker.services.scheduler import SchedulerService
from broker.store.db.models import Event, Job, Placement, Queue
from broker.store.db.runtime import open_database
from broker.store.scheduling import commit as scheduling
from broker.store.scheduling import commit_cycle, read_inventory
from tests.scheduler.conftest import add_cluster, add_queue, count, crash_at_the_events, placements_of, submit


def test_a_commit_that_dies_midway_leaves_nothing_and_the_next_cycle_places_once(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        queue = add_queue(session)
        jobs = [submit(session, queue, f"job-{i}", gpus=8, pods=2) for i in range(3)]

    with crash_at_the_events(db):
        scheduler.run_once()
    with db.sessions() as session:
        assert count(session, Placement) == 0
        assert {session.get(Job, j.id).state for j in jobs} == {"Queued"}

    assert sorted(scheduler.run_once().admitted) == sorted(j.id for j in jobs)
    assert scheduler.run_once().admitted == []
    with db.sessions() as session:
        for job in jobs:
            assert [p.generation for p in placements_of(session, job.id)] == [1]
        assert count(session, Event, Event.reason == "Admitted") == 3


SLICE = 4  # jobs whose decisions a transaction commits, at most (`JOBS_PER_TRANSACTION`)


@pytest.fixture
def slices_of_four(monkeypatch):
    monkeypatch.setattr(scheduling, "JOBS_PER_TRANSACTION", SLICE)


def test_a_commit_that_dies_in_its_second_slice_keeps_the_first_and_the_next_cycle_places_the_rest_once(
        db, setup, scheduler, slices_of_four):
    """A cycle's decisions are committed a slice of jobs per transaction (a new leader's first cycle admits thousands:
    one transaction held the write lock from every submission meanwhile); each job with all of its placements and
    events in one slice."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=4)
        queue = add_queue(session)
        jobs = [submit(session, queue, f"job-{i}", gpus=8, pods=1) for i in range(16)]
    with crash_at_the_events(db, slice_=2):
        scheduler.run_once()
    with db.sessions() as session:
        states = {j.id: session.get(Job, j.id).state for j in jobs}
        admitted = {job_id for job_id, state in states.items() if state == "Admitted"}
        assert len(admitted) == SLICE and set(states.values()) == {"Admitted", "Queued"}
        for job_id in states:
            assert len(placements_of(session, job_id)) == (job_id in admitted)
            assert count(session, Event, Event.object_id == str(job_id), Event.reason == "Admitted") == \
                (job_id in admitted)
    assert sorted(scheduler.run_once().admitted) == sorted(states.keys() - admitted)
    assert scheduler.run_once().admitted == []
    with db.sessions() as session:
        for job in jobs:
            assert [p.generation for p in placements_of(session, job.id)] == [1]
        assert count(session, Event, Event.reason == "Admitted") == len(jobs)


class AnotherSchedulerCommitsBefore:
    """The database, where another scheduler commits a placement just before this one's `nth` write transaction."""

    def __init__(self, db, nth: int, job_id: int, cluster_id: int) -> None:
        self.db, self.nth, self.job_id, self.cluster_id, self.writes = db, nth, job_id, cluster_id, 0

    @contextmanager
    def write(self):
        self.writes += 1
        if self.writes == self.nth:
            with self.db.write() as session:
                session.add(Placement(job_id=self.job_id, cluster_id=self.cluster_id, cluster_name="eu-west",
                                      state="Decided", generation=1))
        with self.db.write() as session:
            yield session


def test_a_slice_that_finds_another_schedulers_commit_drops_itself_and_the_rest(db, setup, slices_of_four):
    """The slices before it stand (their jobs are admitted); the outcome is stale, which makes the scheduler read
    everything again."""
    with setup() as session:
        cluster = add_cluster(session, "eu-west", leaves=4)
        queue = add_queue(session)
        jobs = [submit(session, queue, f"job-{i}", gpus=8, pods=1) for i in range(16)]
        foreign = submit(session, queue, "foreign", gpus=8, state="Admitted")
        submit(session, queue, "waiting", gpus=8, pods=1)  # no room left: the cycle has a reason for it
    with db.read() as session:
        inventory = read_inventory(session, now=time.time())
    result = schedule(inventory.snapshot, inventory.pending)
    assert len(result.placements) == len(jobs) and len(result.waiting) == 1
    outcome = commit_cycle(AnotherSchedulerCommitsBefore(db, 2, foreign.id, cluster.id), inventory, result)
    assert outcome.stale and len(outcome.admitted) == SLICE and outcome.changed == []
    with db.sessions() as session:
        admitted = set(session.scalars(select(Job.id).where(Job.state == "Admitted", Job.id != foreign.id)))
        assert admitted == set(outcome.admitted)
        assert count(session, Placement) == len(admitted) + 1
    assert [p.job_id for p in result.placements[:len(admitted)]] == [str(j) for j in sorted(admitted)]  # FIFO


def test_each_job_is_committed_with_the_preemptions_that_make_its_room(db, setup, scheduler, slices_of_four):
    """In whichever slice it falls: a preemption committed in another slice than its preemptor's would be skipped
    (its preemptor not admitted there), and the preemptor placed on nodes still taken."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=3, nodes_per_leaf=2)
        queue = add_queue(session, preemption="LowerPriority")
        low = [submit(session, queue, f"low-{i}", gpus=8, priority=100) for i in range(6)]
    assert len(scheduler.run_once().admitted) == len(low)
    with setup() as session:
        high = [submit(session, session.get(Queue, queue.id), f"high-{i}", gpus=8, priority=10_000) for i in range(6)]
    outcome = scheduler.run_once()
    assert outcome.admitted == [j.id for j in high] and outcome.preempted == len(low)
    with db.sessions() as session:
        assert [p.state for j in low for p in placements_of(session, j.id)] == ["Deleting"] * len(low)
        assert count(session, Event, Event.reason == "Preempted") == len(low)


@pytest.mark.parametrize("meanwhile", ["cancelled", "admitted"])
def test_a_job_cancelled_or_placed_after_the_read_gets_no_placement(db, setup, meanwhile):
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "raced", gpus=8)
    with db.read() as session:
        inventory = read_inventory(session, now=time.time())
    result = schedule(inventory.snapshot, inventory.pending)
    assert result.placements
    with setup() as session:
        stored = session.get(Job, job.id)
        if meanwhile == "cancelled":
            stored.cancel_requested_at = datetime.now(timezone.utc)
        else:
            stored.state = "Admitted"
    outcome = commit_cycle(db, inventory, result)
    assert (outcome.admitted, outcome.dropped, outcome.placements) == ([], [job.id], 0)
    with db.sessions() as session:
        assert placements_of(session, job.id) == []
        assert count(session, Event, Event.reason == "Admitted") == 0


def test_decisions_from_a_snapshot_another_scheduler_has_overtaken_are_dropped(db, setup):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=1)
        queue = add_queue(session)
        first, second = submit(session, queue, "first", gpus=8), submit(session, queue, "second", gpus=8)
    cycles = []
    for _ in range(2):  # two schedulers read the same inventory: each would give the one node away
        with db.read() as session:
            inventory = read_inventory(session, now=time.time())
        cycles.append((inventory, schedule(inventory.snapshot, inventory.pending)))
    assert commit_cycle(db, *cycles[0]).admitted == [first.id]
    late = commit_cycle(db, *cycles[1])
    assert late.stale and late.admitted == []
    with db.sessions() as session:
        assert count(session, Placement) == 1
        assert session.get(Job, second.id).state == "Queued"


def test_two_schedulers_running_at_once_never_place_a_job_twice(db, setup, settings):
    """Two services with their own connection pools, started together each round on one database."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=4)
        queue = add_queue(session)
        session.flush()
        queue_id = queue.id
    databases = [open_database(settings, upgrade=False) for _ in range(2)]
    services = [SchedulerService(d, settings) for d in databases]
    errors = []
    try:
        for round_ in range(4):
            with setup() as session:
                queue = session.get(Queue, queue_id)
                for i in range(4):
                    submit(session, queue, f"r{round_}-{i}", gpus=8, pods=1)
            start = threading.Barrier(2)

            def run(service):
                try:
                    start.wait()
                    service.run_once()
                except Exception as exc:  # surfaced below, with the thread's error
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=(s,)) for s in services]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            for service in services:  # whatever a dropped cycle left is placed now
                service.run_once()
    finally:
        for database in databases:
            database.dispose()
    with db.sessions() as session:
        jobs = session.scalars(select(Job)).all()
        assert len(jobs) == 16 and {j.state for j in jobs} == {"Admitted"}
        for job in jobs:
            assert len(placements_of(session, job.id)) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_cancel_racing_the_scheduler_never_orphans_a_placement(db, setup, scheduler):
    """The scheduler commits after the cancel request has read the job and before it writes (on PostgreSQL: on
    SQLite the request's write holds the write lock from its start, so the scheduler commits before or after it)."""
    from broker.store.jobs import request_cancel
    from broker.store.tenancy import Principal

    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "raced", gpus=8)
    admitted, fired = [], []

    def scheduler_commits_first(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE JOBS") and not fired:
            fired.append(True)  # once: the scheduler's own updates pass through here too
            admitted.append(scheduler.run_once())

    event.listen(db.engine, "before_cursor_execute", scheduler_commits_first)
    try:
        with db.write() as request:
            request_cancel(request, Principal("admin"), job.id)
    finally:
        event.remove(db.engine, "before_cursor_execute", scheduler_commits_first)
    assert admitted and admitted[0].admitted == [job.id]
    with db.sessions() as session:
        stored = session.get(Job, job.id)
        assert stored.state == "Admitted" and stored.cancel_requested_at is not None  # the dispatcher finishes it
        assert [p.state for p in placements_of(session, job.id)] == ["Decided"]
        assert count(session, Event, Event.reason == "CancelRequested") == 1
        assert count(session, Event, Event.reason == "Cancelled") == 0
