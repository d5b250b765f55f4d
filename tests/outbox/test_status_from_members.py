"""record_status and record_list: what a member's watch or list says of the broker's copies, and what the
placement and its job make of it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from broker.store.outbox import record_list, record_status, record_statuses
from tests.locks import against_a_transaction_locking
from tests.outbox.conftest import NOW, ago, manifest, on_member, seen

SPLIT = manifest("shard-a", "shard-b", failure_policy={"maxRestarts": 2})


def _record(outbox, job: int, obj_of, cluster: str = "eu-west", **kwargs):
    """record_status of the member object `obj_of(placement id)` for the job's first placement."""
    placement = outbox.placements(job)[0]
    return outbox.write(record_status, outbox.cluster_id(cluster), obj_of(placement.id), NOW, **kwargs)


def test_a_copy_whose_pods_are_all_ready_runs_and_so_does_its_job(outbox):
    job = outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen()}, state="Starting")
    _record(outbox, job, lambda pid: on_member(pid, ready=1))
    [placement] = outbox.placements(job)
    assert (placement.state, placement.started_at) == ("Running", NOW)
    assert placement.status["appliedGeneration"] == 1 and placement.status["resourceVersion"] == "11"
    assert (outbox.read_job(job).state, outbox.read_job(job).started_at) == ("Running", NOW)


def test_a_running_copy_whose_pods_restart_stays_running(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1), "started_at": ago(60)},
                     state="Running")
    _record(outbox, job, lambda pid: on_member(pid, ready=0))
    [placement] = outbox.placements(job)
    assert (placement.state, placement.started_at) == ("Running", ago(60))
    assert placement.status["resourceVersion"] == "11"  # what it shows is the member's latest


def test_an_older_or_same_status_is_not_taken(outbox):
    job = outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen(version=11)})
    _record(outbox, job, lambda pid: on_member(pid, version=11, ready=1))
    assert outbox.placements(job)[0].state == "Starting"


def test_a_copy_the_member_completed_succeeds_the_placement_and_frees_it(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running")
    changes = _record(outbox, job, lambda pid: on_member(pid, terminal="Completed"))
    assert changes.freed
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at) == ("Succeeded", NOW)
    assert outbox.events(job)[0] == ("MemberSucceeded", "on eu-west completed")
    assert outbox.read_job(job).state == "Succeeded"


def test_a_failed_copy_fails_its_job_with_the_members_words(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running")
    _record(outbox, job, lambda pid: on_member(pid, terminal="Failed", message="BackoffLimitExceeded"))
    assert outbox.events(job)[0] == ("MemberFailed", "on eu-west failed: BackoffLimitExceeded")
    assert outbox.warnings(job) == ["MemberFailed", "Failed"]
    assert outbox.read_job(job).state == "Failed"


def test_a_failed_part_within_its_restarts_is_placed_again_alone(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "member_uid": "uid-1",
                      "status": seen(part="shard-a", ready=1)},
                     {"part": "shard-b", "cluster": "us-east", "state": "Running", "status": seen(part="shard-b")},
                     mode="split", spec=SPLIT, state="Running", restart_count=1)
    changes = _record(outbox, job, lambda pid: on_member(pid, part="shard-a", terminal="Failed", message="OOM"))
    assert changes.requeued == {job} and changes.freed
    requeued = outbox.read_job(job)
    assert (requeued.state, requeued.restart_count) == ("Queued", 2)
    assert outbox.events(job) == [
        ("PartFailed", "shard-a on eu-west failed: OOM"),
        ("PartRestarting", "shard-a failed; restarting it alone (restart 2 of 2); back in its queue")]
    assert outbox.warnings(job) == ["PartFailed"]


def test_a_failed_part_beyond_its_restarts_fails_the_job(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "member_uid": "uid-1",
                      "status": seen(part="shard-a", ready=1)},
                     mode="split", spec=SPLIT, state="Running", restart_count=2)
    changes = _record(outbox, job, lambda pid: on_member(pid, part="shard-a", terminal="Failed"))
    assert not changes.requeued
    failed = outbox.read_job(job)
    assert (failed.state, failed.reason, failed.restart_count, failed.finished_at) == (
        "Failed", "shard-a failed beyond its restarts (2 of 2)", 2, NOW)


def test_a_part_that_fails_after_its_job_was_cancelled_is_not_restarted(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "member_uid": "uid-1",
                      "status": seen(part="shard-a", ready=1)},
                     mode="split", spec=SPLIT, state="Running", cancel_requested_at=NOW)
    assert not _record(outbox, job, lambda pid: on_member(pid, part="shard-a", terminal="Failed")).requeued
    assert outbox.read_job(job).restart_count == 0


def test_a_part_that_succeeds_says_so_by_its_name(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "member_uid": "uid-1",
                      "status": seen(part="shard-a", ready=1)},
                     {"part": "shard-b", "cluster": "us-east", "state": "Running", "status": seen(part="shard-b")},
                     mode="split", spec=SPLIT, state="Running")
    _record(outbox, job, lambda pid: on_member(pid, part="shard-a", terminal="Completed"))
    assert outbox.events(job) == [("PartSucceeded", "shard-a on eu-west completed")]
    assert outbox.warnings(job) == []


def test_what_is_not_a_copy_of_this_placement_on_this_member_teaches_nothing(outbox):
    job = outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen()})
    for obj_of, cluster in [(lambda pid: on_member(pid, ready=1), "us-east"),  # another member
                            (lambda pid: on_member(pid, ready=1, uid="uid-2"), "eu-west"),  # another copy
                            (lambda pid: on_member(pid + 100, ready=1), "eu-west"),  # no such placement
                            (lambda pid: {"metadata": {"labels": {"archipelago.io/placement-id": "x"}}}, "eu-west"),
                            (lambda pid: {"metadata": {}}, "eu-west")]:
        changes = _record(outbox, job, obj_of, cluster)
        assert (changes.requeued, changes.freed, changes.dispatch) == (set(), False, False)
    assert outbox.placements(job)[0].state == "Starting"


def test_a_status_seen_before_the_apply_is_recorded_is_kept_for_it_not_followed(outbox):
    job = outbox.job({"state": "Applying", "status": seen(version=5)})
    _record(outbox, job, lambda pid: on_member(pid, version=7, ready=1))
    [placement] = outbox.placements(job)
    assert (placement.state, placement.status["resourceVersion"]) == ("Applying", "7")
    _record(outbox, job, lambda pid: on_member(pid, version=6, ready=1))
    assert outbox.placements(job)[0].status["resourceVersion"] == "7"
    _record(outbox, job, lambda pid: on_member(pid, version=8), deleted=True)
    assert outbox.placements(job)[0].status["resourceVersion"] == "7"


def test_a_copy_deleted_by_someone_else_is_applied_again_while_its_job_runs(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1), "attempts": 2,
                      "next_attempt_at": NOW}, state="Running")
    changes = _record(outbox, job, lambda pid: on_member(pid), deleted=True)
    assert changes.dispatch
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid, placement.attempts, placement.next_attempt_at) == (
        "Applying", None, 0, None)
    drift = "JobSet research/train was deleted on eu-west by someone else"
    assert outbox.read_job(job).status["drift"] == drift
    assert outbox.events(job) == [("Drift", f"{drift}; applying it again")] and outbox.warnings(job) == ["Drift"]


def test_a_copy_changed_by_someone_else_is_applied_again_and_keeps_its_uid(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "member_uid": "uid-1",
                      "status": seen(part="shard-a", ready=1, generation=1, applied=1)},
                     mode="split", spec=SPLIT, state="Running")
    _record(outbox, job, lambda pid: on_member(pid, part="shard-a", ready=1, generation=2))
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid) == ("Applying", "uid-1")
    assert outbox.events(job) == [("Drift", "JobSet research/train-shard-a was changed on eu-west by someone else "
                                            "(generation 1 → 2); applying it again")]


def test_a_newer_generation_the_broker_applied_is_not_drift(outbox):
    job = outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen(generation=2, applied=2)})
    _record(outbox, job, lambda pid: on_member(pid, generation=2, ready=1))
    assert outbox.placements(job)[0].state == "Running"
    assert outbox.placements(job)[0].status["appliedGeneration"] == 2


def test_a_copy_deleted_after_its_job_ended_is_reported_and_left_deleted(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running",
                     cancel_requested_at=NOW)
    changes = _record(outbox, job, lambda pid: on_member(pid), deleted=True)
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at) == ("Deleted", NOW)
    assert outbox.events(job)[0] == ("Drift", "JobSet research/train was deleted on eu-west by someone else")
    assert (outbox.read_job(job).state, outbox.read_job(job).finished_at) == ("Cancelled", NOW)
    assert not changes.dispatch


def test_counts_that_lag_a_verdict_refine_it_and_keep_the_applied_generation(outbox):
    job = outbox.job({"state": "Succeeded", "member_uid": "uid-1", "status": seen(generation=1, applied=1)},
                     state="Succeeded")
    _record(outbox, job, lambda pid: {**on_member(pid, version=12, generation=3, terminal="Completed"),
                                      "status": {"replicatedJobsStatus": [{"name": "workers", "succeeded": 1}],
                                                 "terminalState": "Completed"}})
    [placement] = outbox.placements(job)
    assert placement.state == "Succeeded"
    assert (placement.status["resourceVersion"], placement.status["appliedGeneration"]) == ("12", 1)
    assert outbox.read_job(job).status["replicatedJobsStatus"][0]["succeeded"] == 1
    for older_or_deleted in [dict(version=12), dict(version=13, deleted=True)]:
        deleted = older_or_deleted.pop("deleted", False)
        _record(outbox, job, lambda pid: on_member(pid, **older_or_deleted), deleted=deleted)
        assert outbox.placements(job)[0].status["resourceVersion"] == "12"


def test_a_copy_being_deleted_teaches_nothing(outbox):
    job = outbox.job({"state": "Deleting", "member_uid": "uid-1", "status": seen()}, cancel_requested_at=NOW)
    _record(outbox, job, lambda pid: on_member(pid, terminal="Failed"))
    assert outbox.placements(job)[0].state == "Deleting" and outbox.events(job) == []


def test_a_list_that_no_longer_shows_a_running_copy_fails_it_and_never_runs_it_again(outbox):
    """Between its last status and the list, the copy may have finished (and been deleted) or been cut short:
    not known, so it is not run again; the job fails and says why."""
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1, version=10)},
                     state="Running")
    shown = outbox.job({"state": "Running", "member_uid": "uid-2", "status": seen(uid="uid-2", version=10)},
                       state="Running")
    too_new = outbox.job({"state": "Starting", "member_uid": "uid-3", "status": seen(uid="uid-3", version=30)})
    elsewhere = outbox.job({"state": "Running", "member_uid": "uid-4", "cluster": "us-east",
                            "status": seen(uid="uid-4", version=10)}, state="Running")
    listed = [on_member(outbox.placements(shown)[0].id, uid="uid-2", version=10)]
    changes = outbox.write(record_list, outbox.cluster_id("eu-west"), listed, "20", NOW)
    assert changes.freed and not changes.dispatch and not changes.requeued
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid, placement.finished_at) == ("Failed", None, NOW)
    vanished = ("JobSet research/train vanished from eu-west between its last status (resourceVersion 10, Running) "
                "and a list at 20: whether it finished is not known, so it is not run again")
    assert outbox.events(job)[0] == ("CopyVanished", vanished)
    assert outbox.warnings(job) == ["CopyVanished", "Failed"]
    assert (outbox.read_job(job).state, outbox.read_job(job).reason) == ("Failed", f"on eu-west: {vanished}")
    for kept in (shown, too_new, elsewhere):
        assert outbox.events(kept) == []


def test_a_split_part_that_vanished_fails_its_job_whatever_its_failure_policy_allows(outbox):
    job = outbox.job({"part": "shard-a", "state": "Running", "member_uid": "uid-1",
                      "status": seen(part="shard-a", ready=1, version=10)}, mode="split", spec=SPLIT, state="Running")
    outbox.write(record_list, outbox.cluster_id("eu-west"), [], "20", NOW)
    assert [p.state for p in outbox.placements(job)] == ["Failed"]
    assert outbox.read_job(job).state == "Failed" and outbox.read_job(job).restart_count == 0


def test_a_deleted_copy_whose_last_state_is_its_end_keeps_its_verdict_and_is_not_run_again(outbox):
    """A watch's DELETED event carries the copy's last state: it ended (its member's TTL, or someone who deleted it
    once it was done), so its verdict is recorded and nothing is applied or deleted again."""
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1, version=10)},
                     state="Running")
    changes = _record(outbox, job, lambda pid: on_member(pid, version=12, terminal="Completed"), deleted=True)
    assert not changes.dispatch
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid, placement.next_attempt_at) == ("Succeeded", None, None)
    assert outbox.read_job(job).state == "Succeeded"
    assert [reason for reason, _ in outbox.events(job)] == ["MemberSucceeded", "Succeeded"]


def test_a_finished_copy_is_deleted_by_the_broker_after_the_ttl_its_tenant_asked_for(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running",
                     spec={**manifest(), "spec": {**manifest()["spec"], "ttlSecondsAfterFinished": 90}})
    changes = _record(outbox, job, lambda pid: on_member(pid, terminal="Completed"))
    assert changes.dispatch
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid) == ("Succeeded", "uid-1")
    assert placement.next_attempt_at == NOW + timedelta(seconds=90)


def test_a_finished_copy_without_a_ttl_stays_on_its_member(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running")
    assert not _record(outbox, job, lambda pid: on_member(pid, terminal="Completed")).dispatch
    assert outbox.placements(job)[0].next_attempt_at is None


def test_a_finished_copy_deleted_by_someone_else_first_is_not_deleted_again(outbox):
    job = outbox.job({"state": "Succeeded", "member_uid": "uid-1", "status": seen(terminal="Completed"),
                      "next_attempt_at": NOW}, state="Succeeded")
    _record(outbox, job, lambda pid: on_member(pid, version=20, terminal="Completed"), deleted=True)
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid, placement.next_attempt_at) == ("Succeeded", None, None)


def test_a_copy_missing_from_a_list_after_its_job_ended_is_deleted_then(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running",
                     cancel_requested_at=NOW)
    outbox.write(record_list, outbox.cluster_id("eu-west"), [], "20", NOW)
    [placement] = outbox.placements(job)
    assert (placement.state, placement.finished_at) == ("Deleted", NOW)
    assert (outbox.read_job(job).state, outbox.read_job(job).finished_at) == ("Cancelled", NOW)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_batch_of_statuses_locks_its_jobs_in_the_order_every_batch_does(outbox):
    """PostgreSQL locks rows as a transaction goes. A batch of watch events that reports on the second job, then the
    first, against a transaction locking the first, then the second (ids ascending, as `lock_jobs` does), would
    each hold what the other waits for: PostgreSQL would abort one. The batch locks the first job first: it waits
    for the other transaction to end, then records both."""
    first, second = (outbox.job({"state": "Starting", "member_uid": "uid-1", "status": seen()}, state="Starting")
                     for _ in range(2))
    a, b = (outbox.placements(job)[0].id for job in (first, second))
    eu_west = outbox.cluster_id("eu-west")
    batch = [(eu_west, on_member(b, ready=1), False), (eu_west, on_member(a, ready=1), False)]
    assert against_a_transaction_locking(outbox.db, first, second, lambda: outbox.write(record_statuses, batch, NOW))
    assert [outbox.placements(job)[0].state for job in (first, second)] == ["Running", "Running"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_list_locks_the_jobs_of_the_copies_it_misses_with_those_it_shows(outbox):
    """A list that shows the second job's copy and misses the first's, against a transaction locking the first, then
    the second: had the list locked the copy it shows before the one it misses, each would hold what the other
    waits for. It locks both first, ids ascending: it waits for the other transaction to end, then records both."""
    first = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running")
    second = outbox.job({"state": "Starting", "member_uid": "uid-2", "status": seen(uid="uid-2")}, state="Starting")
    listed = [on_member(outbox.placements(second)[0].id, uid="uid-2", ready=1)]
    eu_west = outbox.cluster_id("eu-west")
    assert against_a_transaction_locking(outbox.db, first, second,
                                         lambda: outbox.write(record_list, eu_west, listed, "20", NOW)).freed
    assert [outbox.placements(job)[0].state for job in (first, second)] == ["Failed", "Running"]


def test_a_restart_by_the_members_failure_policy_is_an_event_saying_how_many_count(outbox):
    job = outbox.job({"state": "Running", "member_uid": "uid-1", "status": seen(ready=1)}, state="Running")
    restarted = lambda pid: {**on_member(pid, ready=1), "status": {  # noqa: E731
        **on_member(pid, ready=1)["status"], "restarts": 2, "restartsCountTowardsMax": 1}}
    _record(outbox, job, restarted)
    assert outbox.events(job) == [("MemberRestarted", "on eu-west: its member restarted the JobSet (restart 2, 1 "
                                                      "counting toward its maxRestarts)")]
    _record(outbox, job, lambda pid: {**restarted(pid), "metadata": {**restarted(pid)["metadata"],
                                                                      "resourceVersion": "12"}})
    assert [reason for reason, _ in outbox.events(job)].count("MemberRestarted") == 1  # once per restart
    assert outbox.read_job(job).restart_count == 1
