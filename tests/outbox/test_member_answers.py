"""What the dispatcher records of a member's answer other than an applied copy: try again later (retry_later),
refused by the member's admission (refuse_apply: placed elsewhere), failed for good (fail_apply), deleted
(finish_delete); and the wake-ups a step asks for (Changes)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest

from broker.services import outcomes as member_outcomes
from broker.store.db import runtime
from broker.store.db.models import Placement
from broker.store.db.runtime import WRITE_BUDGET, within
from broker.store.outbox import (Changes, Work, due_work, fail_apply, finish_delete, lock_jobs, placement_owner,
                                 refuse_apply, retry_later, settle_job)
from tests.locks import ticking, write_transactions
from tests.outbox.conftest import NOW, manifest, seen


def _work(outbox, job: int) -> Work:
    [work] = [w for w in outbox.write(due_work, NOW, [outbox.cluster_id("eu-west")]) if w.job_id == job]
    return work


def test_a_member_that_cannot_do_it_now_is_tried_again_later_and_said_once_per_error(outbox):
    job = outbox.job({"state": "Applying", "attempts": 1})
    work = _work(outbox, job)
    for error in ("500 InternalError", "500 InternalError", "timed out"):
        outbox.write(retry_later, work, error, 30.0, NOW)
    [placement] = outbox.placements(job)
    assert (placement.attempts, placement.last_error, placement.next_attempt_at) == (
        4, "timed out", NOW + timedelta(seconds=30))
    assert outbox.events(job) == [("MemberRetrying", "eu-west: 500 InternalError; retrying"),
                                  ("MemberRetrying", "eu-west: timed out; retrying")]
    assert outbox.warnings(job) == ["MemberRetrying"] * 2


def test_a_retry_for_a_placement_that_moved_on_is_dropped(outbox):
    job = outbox.job({"state": "Applying"})
    work = _work(outbox, job)
    with outbox.db.write() as session:
        session.get(Placement, work.placement_id).state = "Deleting"
    outbox.write(retry_later, work, "timed out", 30.0, NOW)
    assert (outbox.placements(job)[0].attempts, outbox.events(job)) == (0, [])


def test_a_refusal_fails_the_placement_and_the_job_with_the_members_words(outbox):
    job = outbox.job({"state": "Applying"})
    changes = outbox.write(fail_apply, _work(outbox, job), "spec.coordinator: not found", NOW)
    assert changes.freed
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at, placement.last_error) == (
        "Failed", NOW, "spec.coordinator: not found")
    failed = outbox.read_job(job)
    why = "eu-west refused the JobSet: spec.coordinator: not found"
    assert (failed.state, failed.reason, failed.finished_at) == ("Failed", why, NOW)
    assert outbox.events(job) == [("ApplyFailed", why), ("Failed", why)]
    assert outbox.warnings(job) == ["ApplyFailed", "Failed"]


def test_an_override_rule_that_breaks_the_jobset_fails_it_naming_the_rule(outbox):
    job = outbox.job({"state": "Decided"})
    work = Work(**{**_work(outbox, job).__dict__, "refused": "override rule 'strip': no containers"})
    outbox.write(fail_apply, work, work.refused, NOW)
    why = "override rule 'strip': no containers, on eu-west"
    assert outbox.events(job) == [("OverrideFailed", why), ("Failed", why)]


def test_a_refusal_after_a_cancel_ends_the_job_cancelled_and_one_for_a_moved_placement_is_dropped(outbox):
    cancelled = outbox.job({"state": "Applying"}, cancel_requested_at=NOW)
    outbox.write(fail_apply, _work(outbox, cancelled), "invalid", NOW)
    assert outbox.read_job(cancelled).state == "Cancelled"

    moved = outbox.job({"state": "Applying"})
    work = _work(outbox, moved)
    with outbox.db.write() as session:
        session.get(Placement, work.placement_id).state = "Deleting"
    assert not outbox.write(fail_apply, work, "invalid", NOW).freed
    assert outbox.read_job(moved).state == "Dispatching" and outbox.events(moved) == []


def test_a_deleted_copy_frees_its_placement_and_settles_the_job(outbox):
    job = outbox.job({"state": "Deleting", "next_attempt_at": NOW}, state="Running", cancel_requested_at=NOW)
    changes = outbox.write(finish_delete, _work(outbox, job), NOW)
    assert changes.freed
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at, placement.next_attempt_at) == ("Deleted", NOW, None)
    assert outbox.events(job)[0] == ("Deleted", "deleted research/train from eu-west")
    assert outbox.read_job(job).state == "Cancelled"


def _deleting(outbox) -> Work:
    job = outbox.job({"state": "Deleting"})
    work = _work(outbox, job)
    with outbox.db.write() as session:
        session.get(Placement, work.placement_id).state = "Deleted"  # another pass recorded it first
    return work


def test_a_deletion_recorded_twice_changes_nothing_the_second_time(outbox):
    work = _deleting(outbox)
    assert not outbox.write(finish_delete, work, NOW).freed
    assert outbox.events(work.job_id) == []


def test_the_owner_of_a_copy_is_its_placements_job(outbox):
    job = outbox.job({"state": "Running"}, state="Running")
    [placement] = outbox.placements(job)
    assert outbox.write(placement_owner, placement.id) == (job, "Running")
    assert outbox.write(placement_owner, placement.id + 1) is None


def test_a_batch_locks_its_jobs_once_and_its_steps_see_their_own_changes(outbox):
    job = outbox.job({"part": "", "state": "Starting", "status": seen()}, state="Dispatching")
    empty = outbox.job(state="Queued")
    outbox.job({"state": "Running"}, state="Running")  # not in the batch: not locked by it
    with outbox.db.write() as session:
        lock_jobs(session, [job, empty, job])
        assert set(session.info["archipelago.locked"].jobs) == {job, empty}
        [placement] = session.info["archipelago.locked"].by_job[job]
        placement.state, placement.status = "Running", seen(ready=1)  # not flushed: the batch's own view
        settle_job(session, job, NOW)
        assert settle_job(session, empty, NOW).requeued == set()  # locked, with no placement yet
    assert outbox.read_job(job).state == "Running"


def test_changes_add_up_and_wake_the_loops_they_give_work_to(outbox):
    woken: list[str] = []
    Changes().wake(woken.append)
    assert woken == []
    both = Changes(requeued={1}).add(Changes(requeued={2}, dispatch=True)).add(Changes())
    assert (both.requeued, both.freed, both.dispatch) == ({1, 2}, False, True)
    both.wake(woken.append)
    assert woken == ["scheduler", "dispatcher"]
    woken.clear()
    Changes(freed=True).wake(woken.append)
    assert woken == ["scheduler"]
    assert Changes().add(Changes(freed=True)).freed


@pytest.mark.parametrize(("most", "clock", "outcomes"), [
    pytest.param(2, lambda: lambda: 0.0, 5, id="at-most-most-a-transaction"),
    pytest.param(100, lambda: ticking(WRITE_BUDGET), 3, id="until-the-time-is-up"),
])
def test_a_large_batch_of_outcomes_is_recorded_in_bounded_transactions(outbox, monkeypatch, most, clock, outcomes):
    """A leader's first dispatch finishes applies by the hundred while a batch commits: each transaction holds the
    write lock (SQLite's, from every submission) for at most OUTCOMES_PER_TRANSACTION of them, and stops taking them
    when it has held it about half of WRITE_BUDGET (in the second case each outcome takes longer); every one is
    recorded once."""
    monkeypatch.setattr(member_outcomes, "OUTCOMES_PER_TRANSACTION", most)
    monkeypatch.setattr(runtime, "within", partial(within, clock=clock()))
    jobs = [outbox.job({"state": "Applying"}) for _ in range(outcomes)]
    works = [_work(outbox, job) for job in jobs]
    with write_transactions(outbox.db) as transactions:
        member_outcomes.record_outcomes(outbox.db, [member_outcomes.Outcome(w, "retry", "timed out", 30.0) for w in works], NOW)
    assert len(transactions) == 3
    assert [outbox.placements(job)[0].attempts for job in jobs] == [1] * outcomes


def test_a_member_whose_admission_refuses_the_copy_is_out_for_the_job_which_goes_back_to_its_queue(outbox):
    """Its words are kept for the scheduler (the MemberAdmission filter) and told; nothing was made there, so the
    placement is gone, not failed (issue #45, case 2)."""
    job = outbox.job({"state": "Decided"}, state="Admitted")
    refusal = 'admission webhook "vjobset.kb.io" denied the request: the RestartJob feature gate is disabled'
    changes = outbox.write(refuse_apply, _work(outbox, job), refusal, NOW)
    assert changes.requeued == {job} and changes.freed
    [placement] = outbox.placements(job)
    assert (placement.state, placement.last_error) == ("Deleted", f"refused: {refusal}")
    queued = outbox.read_job(job)
    assert (queued.state, queued.refused) == ("Queued", {"eu-west": refusal})
    assert queued.reason == f"eu-west refused it: {refusal}; us-east may take it"
    assert [reason for reason, _ in outbox.events(job)] == ["Refused", "Requeued"]


def test_a_split_job_refused_on_one_member_goes_back_whole(outbox):
    job = outbox.job({"part": "a", "state": "Decided"}, {"part": "b", "state": "Decided", "cluster": "us-east"},
                     state="Admitted", mode="split", spec=manifest("a", "b"))
    outbox.write(refuse_apply, _work(outbox, job), "forbidden", NOW)
    assert {p.part: p.state for p in outbox.placements(job)} == {"a": "Deleted", "b": "Deleting"}
    assert outbox.read_job(job).state == "Queued"


def test_a_job_every_member_it_could_go_to_refused_fails_with_their_words(outbox):
    """us-east is out by the job's cluster selector: eu-west's refusal is the last word."""
    spec = manifest(annotations={"archipelago.io/cluster-selector": "region=eu"})
    job = outbox.job({"state": "Decided"}, state="Admitted", spec=spec)
    outbox.write(refuse_apply, _work(outbox, job), "exceeded quota: gpus", NOW)
    failed = outbox.read_job(job)
    assert (failed.state, failed.reason) == (
        "Failed", "every member it could run on refused it (eu-west: exceeded quota: gpus)")
