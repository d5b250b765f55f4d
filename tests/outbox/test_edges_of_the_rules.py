"""The outbox's rules at their edges: what a pass with nothing to do skips, what a batch reads, several members or
copies in one pass, the moments recorded when a step ends a job, and whose events they are."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import event, select, update

from broker.store.db.models import Cluster, Event, Job, Placement
from broker.store.outbox import (Work, cancellations_or_fail_over_due, due_work, fail_over, finish_delete, lock_jobs,
                                 overdue_startups, record_list, record_status, start_apply)
from tests.outbox.conftest import NOW, ago, manifest, on_member, seen

SPLIT = manifest("shard-a", "shard-b")


def _not_ready(outbox, name: str, since) -> None:
    with outbox.db.write() as session:
        session.execute(update(Cluster).where(Cluster.name == name).values(state="NotReady"))
        session.add(Event(time=since, kind="cluster", object_id=name, reason="MemberNotReady",
                          message=f"{name} not ready"))


@contextmanager
def _reads(session) -> Iterator[list[str]]:
    """The SELECT statements the session sends meanwhile."""
    reads: list[str] = []

    def read(conn, cursor, statement, *rest) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            reads.append(statement)

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", read)
    try:
        yield reads
    finally:
        event.remove(engine, "before_cursor_execute", read)


def _due(outbox, cluster: str = "eu-west") -> list[Work]:
    return outbox.write(due_work, NOW, [outbox.cluster_id(cluster)])


def test_a_pass_has_nothing_to_do_for_cancelled_jobs_waiting_on_their_members_or_already_ended(outbox):
    """Nothing to do means no write lock for the pass (`cancellations_or_fail_over_due`)."""
    outbox.job({"state": "Running"}, state="Running")
    waiting = outbox.job({"state": "Deleting"}, {"state": "Deleted", "generation": 2}, state="Running",
                         cancel_requested_at=NOW)
    outbox.job({"state": "Deleted"}, state="Cancelled", cancel_requested_at=NOW)
    outbox.job({"state": "Succeeded", "cluster": "gone", "cluster_id": None}, state="Succeeded")
    assert not outbox.write(cancellations_or_fail_over_due, NOW, 300.0)

    running = outbox.job({"state": "Running"}, state="Running", cancel_requested_at=NOW)
    assert outbox.write(cancellations_or_fail_over_due, NOW, 300.0)  # its copy is to be deleted
    with outbox.db.write() as session:
        session.execute(update(Placement).where(Placement.job_id == running).values(state="Deleting"))
    assert not outbox.write(cancellations_or_fail_over_due, NOW, 300.0)

    outbox.job({"state": "Deleted"}, state="Dispatching", cancel_requested_at=NOW)
    assert outbox.write(cancellations_or_fail_over_due, NOW, 300.0)  # none left: it is to end Cancelled
    assert outbox.events(waiting) == []


def test_a_member_not_yet_past_the_toleration_does_not_hold_up_another_ones_fail_over(outbox):
    _not_ready(outbox, "eu-west", ago(10))
    _not_ready(outbox, "us-east", ago(120))
    patient = outbox.job({"state": "Running"}, state="Running")
    job = outbox.job({"state": "Running", "cluster": "us-east"}, state="Running")
    assert outbox.write(fail_over, NOW, 60.0).requeued == {job}
    assert outbox.read_job(patient).state == "Running"


def test_a_copy_the_pass_already_marked_for_deletion_keeps_its_reason_and_the_pass_goes_on(outbox):
    _not_ready(outbox, "eu-west", ago(120))
    _not_ready(outbox, "us-east", ago(120))
    cancelled = outbox.job({"part": "shard-a", "state": "Running"},
                           {"part": "shard-b", "state": "Running", "cluster": "us-east"},
                           mode="split", spec=SPLIT, state="Running", cancel_requested_at=NOW)
    other = outbox.job({"state": "Running", "cluster": "us-east"}, state="Running")
    changes = outbox.write(fail_over, NOW, 60.0)
    assert changes.requeued == {other}
    assert [p.state for p in outbox.placements(other)] == ["Deleting"]
    # the first copy failed over cancels the job's other copy; that one is not failed over again
    reasons = sorted(p.last_error for p in outbox.placements(cancelled))
    assert reasons[0] == "cancelled" and reasons[1].startswith("member ") and reasons[1].endswith(": failing over")
    assert outbox.read_job(cancelled).state == "Running"  # cancelled once both copies are gone


def test_a_cancelled_job_whose_last_copy_was_on_a_removed_member_ends_then(outbox):
    job = outbox.job({"state": "Running", "cluster": "gone", "cluster_id": None}, state="Running",
                     cancel_requested_at=ago(5))
    outbox.write(fail_over, NOW, 300.0)
    ended = outbox.read_job(job)
    assert (ended.state, ended.finished_at) == ("Cancelled", NOW)


def test_an_overdue_split_part_is_named_as_its_member_knows_it(outbox):
    job = outbox.job({"part": "shard-b", "state": "Starting", "applied_at": ago(900)}, mode="split", spec=SPLIT,
                     state="Starting")
    [unready] = outbox.write(overdue_startups, NOW, 300.0, [outbox.cluster_id("eu-west")])
    assert (unready.job_id, unready.name) == (job, "train-shard-b")


def test_a_list_reports_every_missing_copy_whatever_it_shows_before_them(outbox):
    shown = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running")
    gone = outbox.job({"state": "Running", "member_uid": "uid-2", "status": seen(uid="uid-2", ready=1)},
                      state="Running")
    listed = [on_member(outbox.placements(shown)[0].id, uid="uid-1", version=10, ready=1)]
    assert outbox.write(record_list, outbox.cluster_id("eu-west"), listed, "20", NOW).freed
    assert [p.state for p in outbox.placements(gone)] == ["Failed"]  # vanished: not run again
    assert [p.state for p in outbox.placements(shown)] == ["Running"]


def test_a_list_locks_no_row_of_a_copy_that_is_not_on_the_member(outbox):
    """Finished copies, and those not applied yet, are neither read one by one nor locked by a list's check."""
    outbox.job({"state": "Succeeded", "member_uid": "uid-1", "status": seen(terminal="Completed")}, state="Succeeded")
    outbox.job({"state": "Decided"}, state="Admitted")
    with outbox.db.write() as session, _reads(session) as reads:
        assert not record_list(session, outbox.cluster_id("eu-west"), [], "20", NOW).dispatch
    assert len(reads) == 1  # the list of the member's copies itself


def test_a_copy_changed_on_its_member_after_its_job_was_cancelled_ends_it_then(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running",
                     cancel_requested_at=ago(5))
    [placement] = outbox.placements(job)
    outbox.write(record_status, outbox.cluster_id("eu-west"), on_member(placement.id, generation=2), NOW)
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at) == ("Deleted", NOW)
    assert (outbox.read_job(job).state, outbox.read_job(job).finished_at) == ("Cancelled", NOW)


def test_applying_moves_only_the_placements_it_was_given(outbox):
    job = outbox.job({"state": "Decided"}, state="Admitted")
    elsewhere = outbox.job({"state": "Decided", "cluster": "us-east"}, state="Admitted")
    moved = outbox.write(start_apply, _due(outbox))
    assert moved == {outbox.placements(job)[0].id}
    assert [p.state for p in outbox.placements(elsewhere)] == ["Decided"]
    assert outbox.read_job(elsewhere).state == "Admitted"


def test_a_split_job_back_in_its_queue_stays_there_while_another_part_is_applied(outbox):
    """Its lost part is placed again by the scheduler: the job leaves its queue only then."""
    job = outbox.job({"part": "shard-a", "state": "Decided", "cluster": "us-east"},
                     {"part": "shard-b", "state": "Deleting", "last_error": "member eu-west is draining"},
                     mode="split", spec=SPLIT, state="Queued")
    assert outbox.write(start_apply, _due(outbox, "us-east")) == {outbox.placements(job)[0].id}
    assert outbox.read_job(job).state == "Queued"


def test_a_pass_takes_at_most_a_thousand_placements(outbox):
    outbox.job(*({"state": "Deleting", "generation": n} for n in range(1001)), state="Running",
               cancel_requested_at=NOW)
    work = _due(outbox)
    assert len(work) == 1000 and work[-1].placement_id == work[0].placement_id + 999


def test_the_steps_of_a_batch_read_their_rows_from_the_batch_not_from_the_database(outbox):
    """`lock_jobs` reads a batch's jobs and placements in two queries a chunk; its steps query none again."""
    job = outbox.job({"state": "Deleting", "member_uid": "uid-1"}, state="Running", cancel_requested_at=NOW)
    [placement] = outbox.placements(job)
    work = Work(placement.id, job, placement.cluster_id, "eu-west", "Deleting", "research", "train", "uid-1", 0, None)
    with outbox.db.write() as session:
        lock_jobs(session, [job])
        with _reads(session) as reads:
            assert finish_delete(session, work, NOW).freed
            session.flush()
    assert reads == []
    assert outbox.read_job(job).state == "Cancelled"


def test_a_jobs_events_are_its_tenants(outbox):
    job = outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen()}, state="Starting")
    [placement] = outbox.placements(job)
    outbox.write(record_status, outbox.cluster_id("eu-west"), on_member(placement.id, ready=1), NOW)
    with outbox.db.read() as session:
        tenant = session.scalar(select(Job.tenant_id).where(Job.id == job))
        owners = list(session.scalars(select(Event.tenant_id).where(Event.kind == "job",
                                                                     Event.object_id == str(job))))
    assert owners == [tenant]
