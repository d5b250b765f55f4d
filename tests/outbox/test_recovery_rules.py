"""Recovery in the outbox: fail_over off members that cannot keep their placements, and the startup timeout
(overdue_startups, evict_unready); and the order in which each locks its jobs on PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import event, update
from sqlalchemy.orm import Session

from broker.services.dispatcher import DispatcherService
from broker.services.members import MemberClients
from broker.store.db.models import Cluster, Event, Job, Placement
from broker.store.errors import Conflict
from broker.store.inventory import remove_cluster
from broker.store.outbox import (StartupPolicy, Unready, evict_all_unready, evict_unready, fail_over, lock_jobs,
                                 overdue_startups, record_statuses)
from tests.locks import against_a_transaction_locking, until_waiting_for_a_lock
from tests.outbox.conftest import NOW, ago, manifest, on_member, seen

POLICY = StartupPolicy(timeout=300, backoff=30, avoid=600, eviction_limit=3)


def _member(outbox, name: str, state: str, *, not_ready_at=None) -> None:
    with outbox.db.write() as session:
        session.execute(update(Cluster).where(Cluster.name == name).values(state=state))
        if not_ready_at is not None:
            session.add(Event(time=not_ready_at, kind="cluster", object_id=name, reason="MemberNotReady",
                              message=f"{name} not ready"))


def test_a_member_not_ready_for_longer_than_the_toleration_loses_every_live_placement(outbox):
    _member(outbox, "eu-west", "NotReady", not_ready_at=ago(120))
    with outbox.db.write() as session:  # later events, none of which says when eu-west went NotReady
        for kind, name, reason, seconds in [("cluster", "eu-west", "MemberSynced", 10), ("job", "eu-west",
                                             "MemberNotReady", 20), ("cluster", "us-east", "MemberNotReady", 30)]:
            session.add(Event(time=ago(seconds), kind=kind, object_id=name, reason=reason, message="-"))
    job = outbox.job({"state": "Running", "status": seen(ready=1)}, state="Running", admitted_at=NOW)
    done = outbox.job({"state": "Deleting", "generation": 2}, {"state": "Succeeded"}, state="Succeeded")
    elsewhere = outbox.job({"state": "Running", "cluster": "us-east"}, state="Running")
    finished = outbox.job({"state": "Running"}, state="Succeeded")
    assert outbox.write(fail_over, NOW, 121.0).requeued == set()  # not yet
    changes = outbox.write(fail_over, NOW, 120.0)
    assert changes.requeued == {job} and changes.freed
    assert changes.dispatch  # the copies marked Deleting: the member's dispatcher, in any replica, deletes them
    why = "member eu-west not ready for 120s: failing over"
    [placement] = outbox.placements(job)
    assert (placement.state, placement.last_error, placement.next_attempt_at) == ("Deleting", why, None)
    requeued = outbox.read_job(job)
    assert (requeued.state, requeued.reason) == ("Queued", f"on eu-west: {why}")
    assert ("FailedOver", f"on eu-west: {why}; back in its queue") in outbox.events(job)
    assert [p.state for p in outbox.placements(done)] == ["Deleting", "Succeeded"]
    assert outbox.read_job(elsewhere).state == "Running"
    assert [p.state for p in outbox.placements(finished)] == ["Deleting"]
    assert outbox.read_job(finished).state == "Succeeded"  # its copy goes; the job is not placed again


def test_fail_over_acts_on_a_placement_as_it_is_once_locked_not_as_it_was_read(outbox):
    """Fail-over reads its targets unlocked, then locks their jobs and placements. On PostgreSQL another writer may
    move a placement on in between — here its copy is recorded Succeeded (a status watch in another replica's lane)
    just before the lock: fail-over must see Succeeded, not the Running it read, leave it alone, and go on with the
    next target (a job still running there)."""
    _member(outbox, "eu-west", "NotReady", not_ready_at=ago(600))
    job = outbox.job({"state": "Running", "status": seen(ready=1)}, state="Running")
    still_running = outbox.job({"state": "Running", "status": seen(ready=1)}, state="Running")
    [placement] = outbox.placements(job)

    def finished_meanwhile(state) -> None:  # before fail-over's first read of jobs: its lock (lock_jobs)
        if state.is_select and state.statement.column_descriptions[0]["entity"] is Job and not finished_meanwhile.done:
            finished_meanwhile.done = True
            connection = state.session.connection()
            connection.execute(update(Placement).where(Placement.id == placement.id).values(state="Succeeded"))
            connection.execute(update(Job).where(Job.id == job).values(state="Succeeded"))
    finished_meanwhile.done = False
    event.listen(Session, "do_orm_execute", finished_meanwhile)
    try:
        changes = outbox.write(fail_over, NOW, 300.0)
    finally:
        event.remove(Session, "do_orm_execute", finished_meanwhile)
    assert finished_meanwhile.done
    assert [p.state for p in outbox.placements(job)] == ["Succeeded"]
    assert outbox.read_job(job).state == "Succeeded"
    assert changes.requeued == {still_running} and [p.state for p in outbox.placements(still_running)] == ["Deleting"]


def test_a_member_not_ready_without_a_recorded_moment_is_not_failed_over(outbox):
    _member(outbox, "eu-west", "NotReady")
    job = outbox.job({"state": "Running"}, state="Running")
    assert not outbox.write(fail_over, NOW, 0.0).freed
    assert outbox.read_job(job).state == "Running"


def test_a_draining_member_keeps_what_runs_and_gives_up_what_has_not_started(outbox):
    _member(outbox, "eu-west", "Draining")
    running = outbox.job({"state": "Running"}, state="Running")
    starting = outbox.job({"part": "shard-a", "state": "Starting"}, {"part": "shard-b", "state": "Decided"},
                          mode="split", spec=manifest("shard-a", "shard-b"), state="Starting")
    outbox.write(fail_over, NOW, 300.0)
    assert outbox.placements(running)[0].state == "Running"
    assert [p.state for p in outbox.placements(starting)] == ["Deleting", "Deleting"]
    assert outbox.placements(starting)[0].last_error == "member eu-west is draining: placing it elsewhere"
    assert outbox.read_job(starting).reason in [f"{part} on eu-west: member eu-west is draining: placing it elsewhere"
                                                for part in ("shard-a", "shard-b")]  # requeued once, for either


def test_the_placements_of_a_removed_member_are_deleted_at_once_and_their_jobs_placed_again(outbox):
    job = outbox.job({"state": "Running", "cluster": "gone", "cluster_id": None}, state="Running")
    cancelled = outbox.job({"state": "Running", "cluster": "gone", "cluster_id": None}, state="Running",
                           cancel_requested_at=NOW)
    changes = outbox.write(fail_over, NOW, 300.0)
    assert changes.requeued == {job}
    assert not changes.dispatch  # nothing left on a member to delete
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at) == ("Deleted", NOW)
    assert outbox.read_job(job).reason == "on gone: member gone was removed: failing over"
    assert outbox.read_job(cancelled).state == "Cancelled"  # nothing left to delete: the cancel is done


def test_a_queued_job_is_not_requeued_again(outbox):
    _member(outbox, "eu-west", "Draining")
    job = outbox.job({"state": "Decided"}, state="Queued")
    assert outbox.write(fail_over, NOW, 0.0).requeued == set()
    assert outbox.events(job) == []


def _starting(outbox, applied_ago: float, **job) -> int:
    return outbox.job({"state": "Starting", "applied_at": ago(applied_ago), "status": seen()}, state="Starting",
                      **job)


def test_a_copy_starting_for_longer_than_its_timeout_is_overdue(outbox):
    overdue = _starting(outbox, 300)
    _starting(outbox, 299)
    patient = _starting(outbox, 400, spec=manifest(annotations={"archipelago.io/startup-timeout": "10m"}))
    late = _starting(outbox, 601, spec=manifest(annotations={"archipelago.io/startup-timeout": "10m"}))
    _starting(outbox, 900, spec=manifest(annotations={"archipelago.io/startup-timeout": "soon"}))
    outbox.job({"state": "Starting", "applied_at": ago(900), "cluster": "us-east"}, state="Starting")
    outbox.job({"state": "Running", "applied_at": ago(900)}, state="Running")
    outbox.job({"state": "Starting"}, state="Starting")  # not applied yet: its clock has not started
    found = outbox.write(overdue_startups, NOW, 300.0, [outbox.cluster_id("eu-west")])
    assert [(u.job_id, u.timeout, u.name, u.namespace) for u in found] == [
        (overdue, 300.0, "train", "research"), (late, 600.0, f"train-{late}", "research"),
        (late + 1, 300.0, f"train-{late + 1}", "research")]
    assert found[0].placement_id == outbox.placements(overdue)[0].id
    assert found[0].cluster_id == outbox.cluster_id("eu-west")
    assert patient not in [u.job_id for u in found]
    assert outbox.write(overdue_startups, NOW, 300.0, []) == []


def _unready(outbox, job: int) -> Unready:
    [placement] = [p for p in outbox.placements(job) if p.state == "Starting"]
    return Unready(placement.id, job, placement.cluster_id, "research", "train", 300.0)


def test_an_eviction_deletes_the_whole_gang_and_places_the_job_again_after_a_back_off_away_from_the_member(outbox):
    job = outbox.job({"part": "shard-a", "state": "Starting", "status": seen(part="shard-a")},
                     {"part": "shard-b", "state": "Succeeded", "cluster": "us-east"},
                     mode="split", spec=manifest("shard-a", "shard-b"), state="Starting", evictions=1,
                     avoid={"us-east": NOW.isoformat(), "far": (NOW + timedelta(hours=1)).isoformat()})
    changes = outbox.write(evict_unready, _unready(outbox, job), "pod p: ImagePullBackOff", NOW, POLICY)
    assert changes.dispatch and changes.freed and changes.requeued == set()
    evicted = outbox.read_job(job)
    assert (evicted.state, evicted.evictions, evicted.requeue_at) == ("Queued", 2, NOW + timedelta(seconds=60))
    until = NOW + timedelta(seconds=600)
    assert evicted.avoid == {"far": (NOW + timedelta(hours=1)).isoformat(), "eu-west": until.isoformat()}
    why = ("shard-a on eu-west: pods not all ready within 300s (0 of 1 Jobs of shard-a ready; pod p: "
           "ImagePullBackOff)")
    assert [p.state for p in outbox.placements(job)] == ["Deleting", "Succeeded"]
    assert [part["state"] for part in evicted.status["parts"]] == ["Deleting", "Succeeded"]  # the job settled
    assert outbox.placements(job)[0].last_error == why
    assert outbox.events(job) == [("Evicted", why), (
        "Requeued", f"evicted (2 of 3): placed again after 60s, not on eu-west until {until:%H:%M:%S} UTC; back in "
                    "its queue")]
    assert outbox.warnings(job) == ["Evicted"]


def test_the_back_off_is_capped_and_the_last_eviction_fails_the_job(outbox):
    capped = StartupPolicy(timeout=300, backoff=30, avoid=600, eviction_limit=9, backoff_cap=100)
    job = _starting(outbox, 400, evictions=3)
    outbox.write(evict_unready, _unready(outbox, job), "", NOW, capped)
    assert outbox.read_job(job).requeue_at == NOW + timedelta(seconds=100)
    assert outbox.events(job)[0][1].endswith("(0 of 1 Jobs of workers ready)")

    last = _starting(outbox, 400, evictions=2)
    outbox.write(evict_unready, _unready(outbox, last), "", NOW, POLICY)
    failed = outbox.read_job(last)
    assert (failed.state, failed.evictions) == ("Failed", 3)
    assert failed.reason == "evicted 3 times, the last: on eu-west: pods not all ready within 300s (0 of 1 Jobs of " \
                            "workers ready)"


def test_a_copy_that_became_ready_or_a_job_cancelled_meanwhile_is_not_evicted(outbox):
    ready = _starting(outbox, 400)
    unready = _unready(outbox, ready)
    with outbox.db.write() as session:
        session.execute(update(Placement).values(state="Running"))
    cancelled = _starting(outbox, 400, cancel_requested_at=NOW)
    failed = _starting(outbox, 400)
    failed_unready = _unready(outbox, failed)
    with outbox.db.write() as session:
        session.get(Job, failed).state = "Failed"
    for job, which in [(ready, unready), (cancelled, _unready(outbox, cancelled)), (failed, failed_unready)]:
        assert not outbox.write(evict_unready, which, "", NOW, POLICY).freed
        assert outbox.read_job(job).evictions == 0


def test_every_member_that_cannot_keep_its_placements_loses_them_in_the_same_pass(outbox):
    _member(outbox, "eu-west", "Draining")
    _member(outbox, "us-east", "Draining")
    jobs = [outbox.job({"state": "Decided", "cluster": name}, state="Admitted") for name in ("eu-west", "us-east")]
    removed = outbox.job({"state": "Decided", "cluster": "gone", "cluster_id": None}, state="Admitted")
    assert outbox.write(fail_over, NOW, 300.0).requeued == {*jobs, removed}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_evictions_lock_their_jobs_ids_ascending_whatever_order_they_were_found_in(outbox):
    """A job placed again after a requeue has a newer placement than a younger job's, so the overdue copies can
    come younger job first. Evicted in that order against a batch holding the older job and asking for the younger,
    each would hold what the other waits for. The evictions lock both jobs first, ids ascending: they wait, then
    evict both."""
    older, younger = _starting(outbox, 400), _starting(outbox, 400)
    overdue = [(_unready(outbox, younger), ""), (_unready(outbox, older), "")]
    changes = against_a_transaction_locking(outbox.db, older, younger,
                                            lambda: outbox.write(evict_all_unready, overdue, NOW, POLICY))
    assert changes.freed
    assert [outbox.read_job(job).evictions for job in (older, younger)] == [1, 1]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_dispatcher_pass_cancels_and_fails_over_in_transactions_that_each_lock_ids_ascending(outbox, settings):
    """The older job's copy has not started on a draining member (fail-over's); the younger job was cancelled
    (its deletion's). Locked cancellations first, then fail-overs, in one transaction — two ascending runs, not one —
    against a batch holding the older job and asking for the younger, each would hold what the other waits for.
    The pass does each in a transaction of its own: the second waits, then fails the older job over."""
    older = outbox.job({"state": "Starting", "cluster": "us-east"}, state="Starting")
    younger = outbox.job({"state": "Running", "status": seen(ready=1)}, state="Running", cancel_requested_at=NOW)
    _member(outbox, "us-east", "Draining")
    dispatcher = DispatcherService(outbox.db, settings, MemberClients(settings), lane=frozenset(), now=lambda: NOW)
    changes = against_a_transaction_locking(outbox.db, older, younger, dispatcher.run_once)
    assert changes.freed
    assert [outbox.placements(job)[0].state for job in (older, younger)] == ["Deleting", "Deleting"]
    assert outbox.read_job(older).state == "Queued"


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_removing_a_member_locks_the_jobs_of_its_placements_before_it_unlinks_them(outbox):
    """Both jobs run on us-east, and each left a copy's placement on eu-west (the younger's Deleted, scanned
    first). Removing eu-west unlinks its placements (ON DELETE SET NULL); had it locked them as found, against a
    batch holding the older job (with its placements) and asking for the younger, each would hold what the other
    waits for. The removal locks their jobs first, ids ascending: it waits, then unlinks both."""
    older = outbox.job({"state": "Succeeded"}, {"state": "Running", "cluster": "us-east", "generation": 2})
    younger = outbox.job({"state": "Deleted"}, {"state": "Running", "cluster": "us-east", "generation": 2})
    with outbox.db.write() as session:  # the older job's row on eu-west rewritten: a later tuple, as in the index
        session.execute(update(Placement).where(Placement.job_id == older, Placement.cluster_name == "eu-west")
                        .values(attempts=1))

    def remove() -> None:
        with outbox.db.write() as session:
            remove_cluster(session, "eu-west")

    against_a_transaction_locking(outbox.db, older, younger, remove)
    assert [[p.cluster_id for p in outbox.placements(job)] for job in (older, younger)] == [
        [None, outbox.cluster_id("us-east")]] * 2


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_member_placed_on_while_its_removal_waits_for_a_lock_is_not_removed(outbox):
    """The removal locks the jobs of the member's placements; while it waits for one, the scheduler commits a
    placement there for another job. Unlinking that one would lock it without its job: the removal is refused, and
    the member keeps its placements."""
    held = outbox.job({"state": "Succeeded"})
    newcomer = outbox.job()
    answers: list = []

    def remove() -> None:
        try:
            with outbox.db.write() as session:
                remove_cluster(session, "eu-west")
        except Conflict as exc:
            answers.append(str(exc))

    remover = threading.Thread(target=remove)
    with outbox.db.write() as session:
        lock_jobs(session, [held])
        remover.start()
        until_waiting_for_a_lock(outbox.db, "the removal never waited for the held job")
        session.add(Placement(job_id=newcomer, cluster_name="eu-west", cluster_id=outbox.cluster_id("eu-west"),
                              state="Decided"))
    remover.join(30)
    assert answers == ["cluster 'eu-west' got a placement while it was being removed; cordon it, then remove it again"]
    assert [p.cluster_id for p in outbox.placements(newcomer)] == [outbox.cluster_id("eu-west")]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_copy_that_starts_on_a_draining_member_while_fail_over_waits_for_its_job_stays(outbox):
    """Fail-over reads its targets, then locks their jobs. A status batch that holds the job sees its copy on the
    draining member start; once it commits, the copy is Running, and a drain keeps what runs: fail-over reads its
    targets again under the locks and leaves it."""
    _member(outbox, "eu-west", "Draining")
    job = outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen()}, state="Starting")
    [placement] = outbox.placements(job)
    eu_west = outbox.cluster_id("eu-west")
    changes: list = []
    fail_over_pass = threading.Thread(target=lambda: changes.append(outbox.write(fail_over, NOW, 300.0)))
    with outbox.db.write() as session:
        record_statuses(session, [(eu_west, on_member(placement.id, ready=1), False)], NOW)
        session.flush()
        fail_over_pass.start()
        until_waiting_for_a_lock(outbox.db, "fail-over never waited for the job")
    fail_over_pass.join(30)
    assert changes and not changes[0].requeued
    assert [p.state for p in outbox.placements(job)] == ["Running"]
    assert "FailedOver" not in [reason for reason, _ in outbox.events(job)]
