"""settle_job: the job's state, reason and status from its placements' (the newest generation of each part)."""

from __future__ import annotations

from broker.store.outbox import settle_job
from tests.outbox.conftest import NOW, manifest, seen

SPLIT = manifest("shard-a", "shard-b")


def test_a_job_whose_copy_started_is_starting_once_and_says_where(outbox):
    job = outbox.job({"state": "Starting", "status": seen()})
    assert outbox.write(settle_job, job, NOW) == type(outbox.write(settle_job, job, NOW))()  # nothing to wake
    settled = outbox.read_job(job)
    assert (settled.state, settled.reason) == ("Starting", "on eu-west; waiting for its pods to be ready")
    assert outbox.events(job) == [("Starting", "on eu-west; waiting for its pods to be ready")]  # said once


def test_a_job_runs_once_every_part_is_running_or_done_and_names_its_clusters_in_order(outbox):
    job = outbox.job({"part": "shard-b", "cluster": "us-east", "state": "Succeeded", "status": seen(part="shard-b")},
                     {"part": "shard-a", "state": "Running", "status": seen(part="shard-a", ready=1)},
                     mode="split", spec=SPLIT, reason="on eu-west; waiting for its pods to be ready")
    outbox.write(settle_job, job, NOW)
    running = outbox.read_job(job)
    assert (running.state, running.reason, running.started_at) == ("Running", None, NOW)
    assert outbox.events(job) == [("Running", "every pod ready on eu-west, us-east")]
    assert [p["part"] for p in running.status["parts"]] == ["shard-a", "shard-b"]


def test_a_job_keeps_the_moment_it_first_ran(outbox):
    job = outbox.job({"state": "Running", "status": seen(ready=1)}, state="Starting", started_at=NOW.replace(hour=9))
    outbox.write(settle_job, job, NOW)
    assert outbox.read_job(job).started_at == NOW.replace(hour=9)


def test_a_part_still_starting_keeps_a_split_job_starting(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "status": seen(part="shard-a", ready=1)},
                     {"part": "shard-b", "cluster": "us-east", "state": "Starting", "status": seen(part="shard-b")},
                     mode="split", spec=SPLIT)
    outbox.write(settle_job, job, NOW)
    assert outbox.read_job(job).reason == "on eu-west, us-east; waiting for its pods to be ready"


def test_a_job_not_all_placed_on_members_yet_stays_dispatching(outbox):
    for other in ("Applying", "Decided"):
        job = outbox.job({"part": "shard-a", "state": "Running", "status": seen(part="shard-a", ready=1)},
                         {"part": "shard-b", "cluster": "us-east", "state": other}, mode="split", spec=SPLIT)
        outbox.write(settle_job, job, NOW)
        assert (outbox.read_job(job).state, outbox.events(job)) == ("Dispatching", [])


def test_the_newest_generation_of_a_part_is_the_one_that_counts(outbox):
    job = outbox.job({"state": "Deleted", "generation": 1, "last_error": "lost"},
                     {"state": "Starting", "generation": 3, "status": seen()},
                     {"state": "Deleted", "generation": 2, "cluster": "us-east"})
    outbox.write(settle_job, job, NOW)
    assert outbox.read_job(job).state == "Starting"
    assert outbox.read_job(job).status["parts"] == [{"part": "", "cluster": "eu-west", "state": "Starting"}]


def test_a_whole_copy_that_completed_succeeds_the_job_and_counts_its_restarts(outbox):
    status = {**seen(succeeded=1, terminal="Completed"), "restarts": 2}
    job = outbox.job({"state": "Succeeded", "status": status}, state="Running", restart_count=5)
    outbox.write(settle_job, job, NOW)  # a whole job's restarts are its member's
    done = outbox.read_job(job)
    assert (done.state, done.reason, done.finished_at, done.restart_count) == (
        "Succeeded", "completed on eu-west", NOW, 2)
    assert done.status["terminalState"] == "Completed"
    assert outbox.events(job) == [("Succeeded", "completed on eu-west")]


def test_a_failed_whole_copy_fails_the_job_with_the_members_words_as_a_warning(outbox):
    job = outbox.job({"state": "Failed", "status": seen(terminal="Failed", message="BackoffLimitExceeded")},
                     state="Running")
    outbox.write(settle_job, job, NOW)
    assert outbox.read_job(job).reason == "failed on eu-west: BackoffLimitExceeded"
    assert outbox.warnings(job) == ["Failed"]


def test_a_split_job_that_succeeded_removes_its_other_parts(outbox):
    spec = manifest("shard-a", "shard-b", success={"operator": "Any", "targetReplicatedJobs": ["shard-a"]})
    job = outbox.job({"part": "shard-a", "state": "Succeeded", "status": seen(part="shard-a", succeeded=1)},
                     {"part": "shard-b", "cluster": "us-east", "state": "Running", "status": seen(part="shard-b")},
                     mode="split", spec=spec, state="Running", restart_count=1)
    changes = outbox.write(settle_job, job, NOW)
    assert changes.dispatch and not changes.requeued
    done = outbox.read_job(job)
    assert done.state == "Succeeded" and done.restart_count == 1  # a split job's restarts are the broker's
    assert done.status["restarts"] == 1
    assert [(p.state, p.last_error, p.next_attempt_at) for p in outbox.placements(job)] == [
        ("Succeeded", None, None), ("Deleting", "job succeeded", None)]


def test_a_cancelled_job_deletes_every_live_copy_and_ends_cancelled_once_none_is_left(outbox):
    job = outbox.job({"state": "Running", "status": seen(ready=1), "next_attempt_at": NOW},
                     {"state": "Deleting", "cluster": "us-east", "last_error": "member us-east is draining",
                      "generation": 2},
                     {"state": "Failed", "generation": 0}, state="Running", cancel_requested_at=NOW)
    changes = outbox.write(settle_job, job, NOW)
    assert changes.dispatch and outbox.read_job(job).state == "Running"  # until its copies are gone
    assert [(p.state, p.last_error, p.next_attempt_at) for p in outbox.placements(job)] == [
        ("Deleting", "cancelled", None), ("Deleting", "member us-east is draining", None), ("Failed", None, None)]
    assert not outbox.write(settle_job, job, NOW).dispatch  # already being deleted: no new work

    gone = outbox.job({"state": "Deleted"}, state="Running", cancel_requested_at=NOW)
    outbox.write(settle_job, gone, NOW)
    cancelled = outbox.read_job(gone)
    assert (cancelled.state, cancelled.reason, cancelled.finished_at) == (
        "Cancelled", "cancelled; removed from every member", NOW)


def test_a_finished_job_keeps_its_verdict_and_its_copies_go(outbox):
    job = outbox.job({"state": "Running", "status": seen(ready=1)}, state="Failed", reason="evicted 3 times",
                     cancel_requested_at=NOW)
    outbox.write(settle_job, job, NOW)
    assert (outbox.read_job(job).state, outbox.read_job(job).reason) == ("Failed", "evicted 3 times")
    assert outbox.placements(job)[0].last_error == "cancelled"  # a cancel after the verdict is still a cancel

    other = outbox.job({"state": "Starting", "status": seen()}, state="Succeeded")
    outbox.write(settle_job, other, NOW)
    assert outbox.placements(other)[0].last_error == "job succeeded"


def test_a_placed_job_with_no_copy_left_goes_back_to_its_queue_naming_what_was_lost(outbox):
    job = outbox.job({"part": "shard-a", "state": "Succeeded", "status": seen(part="shard-a", succeeded=1)},
                     {"part": "shard-b", "cluster": "us-east", "state": "Deleted",
                      "last_error": "member us-east was removed"},
                     {"part": "shard-c", "state": "Deleted"},
                     mode="split", spec=manifest("shard-a", "shard-b", "shard-c"), state="Running",
                     admitted_at=NOW)
    changes = outbox.write(settle_job, job, NOW)
    assert changes.requeued == {job}
    queued = outbox.read_job(job)
    why = "shard-b on us-east: member us-east was removed; shard-c on eu-west: deleted"
    assert (queued.state, queued.reason, queued.admitted_at) == ("Queued", why, None)
    assert outbox.events(job) == [("Requeued", f"{why}; back in its queue")]


def test_a_queued_job_without_copies_is_left_where_it_is(outbox):
    job = outbox.job({"state": "Deleted"}, state="Queued")
    assert not outbox.write(settle_job, job, NOW).requeued
    assert outbox.events(job) == []


def test_drift_reported_on_the_job_stays_in_its_status(outbox):
    job = outbox.job({"state": "Starting", "status": seen()}, status={"drift": "changed by someone else"})
    outbox.write(settle_job, job, NOW)
    assert outbox.read_job(job).status["drift"] == "changed by someone else"
    clean = outbox.job({"state": "Starting", "status": seen()}, status={"drift": ""})
    outbox.write(settle_job, clean, NOW)
    assert "drift" not in outbox.read_job(clean).status


def test_a_job_gone_meanwhile_is_nothing_to_settle(outbox):
    changes = outbox.write(settle_job, 999, NOW)
    assert (changes.requeued, changes.freed, changes.dispatch) == (set(), False, False)


def test_a_whole_jobs_restart_count_is_what_its_members_policy_counts_toward_max_restarts(outbox):
    """Restarts by a rule that ignores maxRestarts (RestartJobSetAndIgnoreMaxRestarts) are not the job's to count:
    the member's `restartsCountTowardsMax` says which did count (issue #45, case 3)."""
    status = {**seen(ready=1), "restarts": 3, "restartsCountTowardsMax": 1}
    job = outbox.job({"state": "Running", "status": status}, state="Running")
    outbox.write(settle_job, job, NOW)
    running = outbox.read_job(job)
    assert (running.restart_count, running.status["restarts"], running.status["restartsCountTowardsMax"]) == (1, 3, 1)
