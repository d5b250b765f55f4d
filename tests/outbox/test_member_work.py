"""The member work the outbox hands the dispatcher (due_work), and what the dispatcher records of it
(start_apply, finish_apply, request_deletions, kept_placements)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import event

from broker.store.db.models import ClusterOverride, Placement
from broker.store.outbox import Work, due_work, finish_apply, kept_placements, request_deletions, start_apply
from tests.locks import against_a_transaction_locking
from tests.outbox.conftest import NOW, manifest, on_member, seen

SPLIT = manifest("shard-a", "shard-b")


def _due(outbox, *clusters: str, limit: int = 1000) -> list[Work]:
    return outbox.write(due_work, NOW, [outbox.cluster_id(c) for c in clusters or ("eu-west",)], limit)


def test_due_work_is_what_waits_for_these_members_now_oldest_first(outbox):
    later = NOW + timedelta(seconds=1)
    job = outbox.job({"part": "shard-b", "state": "Decided"}, {"part": "shard-a", "state": "Applying",
                                                               "next_attempt_at": NOW},
                     {"part": "shard-a", "state": "Deleting", "generation": 0, "member_uid": "uid-0"},
                     {"part": "shard-b", "state": "Applying", "generation": 2, "next_attempt_at": later},
                     {"part": "shard-b", "state": "Running", "generation": 3},
                     {"part": "shard-a", "state": "Decided", "generation": 4, "cluster": "us-east"},
                     mode="split", spec=SPLIT)
    ids = [p.id for p in outbox.placements(job)]
    work = _due(outbox)
    assert [(w.placement_id, w.state, w.name) for w in work] == [
        (ids[0], "Decided", "train-shard-b"), (ids[1], "Applying", "train-shard-a"),
        (ids[2], "Deleting", "train-shard-a")]
    assert [w.placement_id for w in _due(outbox, limit=2)] == ids[:2]
    assert [w.placement_id for w in _due(outbox, "eu-west", "us-east")] == ids[:3] + [ids[5]]
    deleting = work[2]
    assert (deleting.jobset, deleting.member_uid, deleting.namespace, deleting.cluster) == (
        None, "uid-0", "research", "eu-west")
    assert (deleting.job_id, deleting.cluster_id, deleting.attempts) == (job, outbox.cluster_id("eu-west"), 0)


def test_each_part_is_sent_alone_with_the_brokers_labels(outbox):
    job = outbox.job({"part": "shard-b", "state": "Decided", "generation": 3}, mode="split", spec=SPLIT)
    [work] = _due(outbox)
    assert [r["name"] for r in work.jobset["spec"]["replicatedJobs"]] == ["shard-b"]
    labels = work.jobset["metadata"]["labels"]
    assert (labels["archipelago.io/job-id"], labels["archipelago.io/placement-id"]) == (
        str(job), str(work.placement_id))
    assert labels["archipelago.io/generation"] == "3" and labels["archipelago.io/part"] == "shard-b"
    assert work.jobset["metadata"]["namespace"] == "research" and work.overrides == () and work.refused is None


def test_the_override_rules_of_the_members_cluster_rewrite_its_copy_or_refuse_it(outbox, db):
    with db.write() as session:
        session.add(ClusterOverride(name="eu-mirror", apply_order=1, selector="region=eu",
                                    changes={"image": {"registry": "mirror.eu:5000"}}))
    outbox.job({"state": "Decided"})
    outbox.job({"state": "Decided", "cluster": "us-east"})
    eu, us = _due(outbox, "eu-west", "us-east")
    assert eu.overrides == ("eu-mirror",)
    container = eu.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "mirror.eu:5000/library/busybox"
    assert us.overrides == ()

    with db.write() as session:
        session.add(ClusterOverride(name="strip", apply_order=5, cluster="eu-west", changes={"jsonPatch": [
            {"op": "remove", "path": "/spec/replicatedJobs/0/template/spec/template/spec/containers"}]}))
    refused = _due(outbox)[0]
    assert refused.jobset is None and "override rule 'strip'" in refused.refused


def test_a_job_an_earlier_broker_took_is_refused_by_a_rule_that_cannot_check_it(outbox, db):
    """A JobSet stored before the broker refused a device asked for without a limit: a rule that would rewrite it
    cannot tell whether it changes what placement reserved, so its placement fails, naming the field."""
    stored = manifest()
    container = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"nvidia.com/gpu": "8"}}
    outbox.job({"state": "Decided"}, spec=stored)
    with db.write() as session:
        session.add(ClusterOverride(name="eu-mirror", apply_order=1, selector="region=eu",
                                    changes={"image": {"registry": "mirror.eu:5000"}}))
    [refused] = _due(outbox)
    assert refused.jobset is None
    assert refused.refused == ("override rule 'eu-mirror': the JobSet it would rewrite is invalid: spec.replicatedJobs"
                               "[0].template.spec.template.spec.containers[0].resources.limits.nvidia.com/gpu: set a "
                               "limit for nvidia.com/gpu, equal to the request: Kubernetes never overcommits it (or "
                               "set only the limit: the request is taken from it)")


def test_applying_starts_only_what_is_still_decided_for_a_job_meant_to_run(outbox):
    job = outbox.job({"state": "Decided"}, state="Admitted")
    cancelled = outbox.job({"state": "Decided"}, state="Admitted", cancel_requested_at=NOW)
    failed = outbox.job({"state": "Decided"}, state="Failed")
    moved = outbox.job({"state": "Deleting"}, state="Admitted")
    work = _due(outbox)
    assert outbox.write(start_apply, work) == {outbox.placements(job)[0].id}
    assert [p.state for p in outbox.placements(job)] == ["Applying"]
    assert outbox.read_job(job).state == "Dispatching"
    for other in (cancelled, failed, moved):
        assert outbox.read_job(other).state in ("Admitted", "Failed")
        assert outbox.placements(other)[0].state in ("Decided", "Deleting")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_applying_looks_up_each_placements_job_by_its_key(outbox):
    """Not every live job: `job_id IN (SELECT ...)` made SQLite list them all for each statement (30 ms at 100,000),
    and slices of a few placements each took that long again (bench/leader_api.py)."""
    outbox.job({"state": "Decided"}, state="Admitted")
    statements = []

    def capture(_connection, _cursor, statement, parameters, _context, _many):
        if statement.lstrip().upper().startswith("UPDATE PLACEMENTS"):
            statements.append((statement, parameters))

    event.listen(outbox.db.engine, "before_cursor_execute", capture)
    try:
        outbox.write(start_apply, _due(outbox))
    finally:
        event.remove(outbox.db.engine, "before_cursor_execute", capture)
    (statement, parameters), = statements
    with outbox.db.engine.connect() as connection:
        plan = [row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]
    assert not any(step.startswith("SCAN") for step in plan), plan
    assert any(step.startswith("SEARCH jobs USING INTEGER PRIMARY KEY") for step in plan), plan


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_applying_locks_its_jobs_before_their_placements(outbox):
    """A scheduling commit that preempts a job locks its row, then its placements. Had applying taken the job's
    placement (Decided → Applying) before its row, each would hold what the other waits for and PostgreSQL would
    abort one. Applying locks the job first: it waits for the commit to end, then starts what is still Decided."""
    job = outbox.job({"state": "Decided"}, state="Admitted")
    work = _due(outbox)
    assert against_a_transaction_locking(outbox.db, job, job, lambda: outbox.write(start_apply, work),
                                         first_without_placements=True) == {outbox.placements(job)[0].id}
    assert outbox.read_job(job).state == "Dispatching"


def _applying(outbox, **placement) -> tuple[int, Work]:
    job = outbox.job({"state": "Applying", "attempts": 3, "last_error": "500", "next_attempt_at": NOW,
                      **placement})
    return job, _due(outbox)[0]


def test_an_applied_copy_is_starting_with_the_members_answer(outbox):
    job, work = _applying(outbox)
    changes = outbox.write(finish_apply, work, on_member(work.placement_id, generation=4), NOW, adopted=False)
    assert not changes.requeued
    [placement] = outbox.placements(job)
    assert (placement.state, placement.member_uid, placement.applied_at) == ("Starting", "uid-1", NOW)
    assert (placement.attempts, placement.last_error, placement.next_attempt_at) == (0, None, None)
    assert (placement.status["appliedGeneration"], placement.overrides) == (4, [])
    assert outbox.events(job) == [
        ("Applied", f"applied research/train on eu-west (placement {placement.id}, generation 1)"),
        ("Starting", "on eu-west; waiting for its pods to be ready")]


def test_an_apply_that_found_its_copy_ready_runs_at_once_and_names_its_rules(outbox):
    job, work = _applying(outbox, generation=2)
    work = Work(**{**work.__dict__, "overrides": ("eu-mirror", "eu-env")})
    outbox.write(finish_apply, work, on_member(work.placement_id, ready=1), NOW, adopted=True)
    [placement] = outbox.placements(job)
    assert (placement.state, placement.started_at, placement.overrides) == ("Running", NOW, ["eu-mirror", "eu-env"])
    assert outbox.events(job)[0] == ("Applied", f"adopted the existing copy research/train on eu-west (placement "
                                                f"{placement.id}, generation 2; override rules eu-mirror, eu-env)")
    assert outbox.read_job(job).state == "Running"


def test_a_copy_applied_again_after_a_deletion_is_recreated_and_a_status_seen_first_wins(outbox):
    job, work = _applying(outbox, started_at=NOW, status=seen(version=20, ready=1, applied=None))
    outbox.write(finish_apply, work, on_member(work.placement_id, version=15), NOW, adopted=False)
    [placement] = outbox.placements(job)
    assert (placement.state, placement.status["resourceVersion"]) == ("Running", "20")
    assert placement.status["appliedGeneration"] == 1
    assert outbox.events(job)[0][1].startswith("recreated research/train on eu-west")

    other, work = _applying(outbox, status=seen(uid="uid-old", version=20, ready=1, applied=None))
    outbox.write(finish_apply, work, on_member(work.placement_id, version=15), NOW, adopted=False)
    assert outbox.placements(other)[0].status["resourceVersion"] == "15"  # another copy's status is not this one's


def test_an_apply_answered_after_the_placement_moved_on_changes_nothing(outbox):
    job, work = _applying(outbox)
    with outbox.db.write() as session:  # cancelled or failed over while the member was being called
        session.get(Placement, work.placement_id).state = "Deleting"
    changes = outbox.write(finish_apply, work, on_member(work.placement_id), NOW, adopted=False)
    assert (changes.requeued, changes.freed, changes.dispatch) == (set(), False, False)
    assert outbox.placements(job)[0].state == "Deleting" and outbox.events(job) == []


def test_a_cancelled_job_has_its_live_copies_deleted_or_ends_when_none_is_left(outbox):
    running = outbox.job({"state": "Running"}, {"state": "Deleting", "cluster": "us-east", "generation": 2},
                         state="Running", cancel_requested_at=NOW)
    waiting = outbox.job({"state": "Deleting"}, state="Running", cancel_requested_at=NOW)
    gone = outbox.job({"state": "Deleted"}, state="Dispatching", cancel_requested_at=NOW)
    kept = outbox.job({"state": "Running"}, state="Running")
    changes = outbox.write(request_deletions, NOW)
    assert changes.dispatch
    assert [p.state for p in outbox.placements(running)] == ["Deleting", "Deleting"]
    assert (outbox.read_job(gone).state, outbox.read_job(gone).finished_at) == ("Cancelled", NOW)
    assert outbox.read_job(waiting).state == "Running" and outbox.events(waiting) == []
    assert [p.state for p in outbox.placements(kept)] == ["Running"]


def test_the_copies_the_broker_still_owns_are_those_of_placements_it_keeps(outbox):
    job = outbox.job(*({"state": state, "generation": n} for n, state in enumerate(
        ["Decided", "Applying", "Starting", "Running", "Succeeded", "Failed", "Deleting", "Deleted"])))
    outbox.job({"state": "Running"}, state="Running")  # kept, but not asked about
    ids = [p.id for p in outbox.placements(job)]
    assert outbox.write(kept_placements, ids + [999]) == set(ids[1:6])
