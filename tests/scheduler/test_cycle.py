"""Named cases of one scheduling cycle, end to end through the database (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import JSON, event, select, type_coerce, update

from broker.engine.jobset import JobSetError, parse_jobset
from broker.engine.placement import Waiting
from broker.services import build_services
from broker.store.db.models import Job, Node, Placement, Queue
from broker.store.scheduling import read_inventory, reasons_digest, stored_reasons_digest, write_reasons
from tests.locks import against_a_transaction_locking
from tests.placement.fixtures import GPU, manifest
from tests.scheduler.conftest import EPOCH, add_cluster, add_queue, count, job_events, placements_of, submit


def test_a_job_that_fits_is_placed_admitted_and_logged(db, setup, scheduler):
    with setup() as session:
        cluster = add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "train", gpus=8, pods=2)
    outcome = scheduler.run_once()
    assert outcome.admitted == [job.id]
    with db.sessions() as session:
        stored = session.get(Job, job.id)
        assert (stored.state, stored.reason, stored.waiting_reasons) == ("Admitted", None, {})
        assert stored.admitted_at is not None
        [placement] = placements_of(session, job.id)
        assert (placement.state, placement.part, placement.generation) == ("Decided", "", 1)
        assert (placement.cluster_id, placement.cluster_name) == (cluster.id, "eu-west")
        assert (placement.hypernode, placement.tier) == ("leaf-0", 1)
        assert sum(a["pods"] for a in placement.assignments) == 2
        assert sum(u[GPU] for u in placement.node_usage.values()) == 16_000
        assert placement.resources[GPU] == 16_000
        [admitted] = job_events(session, job.id, "Admitted")
        assert admitted.message == "placed on eu-west, HyperNode leaf-0 (tier 1)"
        assert admitted.tenant_id == stored.tenant_id


def test_the_next_cycle_counts_what_the_last_one_placed(db, setup, scheduler):
    """A leaf of 32 GPUs takes one 32-GPU job; its live placement keeps the second one waiting."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        first = submit(session, queue, "first", gpus=8, pods=4)
    scheduler.run_once()
    with setup() as session:
        second = submit(session, session.get(Queue, queue.id), "second", gpus=8, pods=4)
    outcome = scheduler.run_once()
    assert outcome.admitted == []
    with db.sessions() as session:
        assert session.get(Job, first.id).state == "Admitted"
        assert session.get(Job, second.id).waiting_reasons == {"eu-west": "needs 32 GPUs; 0 GPUs free"}


@pytest.mark.parametrize("pods_seen, foreign, fits", [
    (True, False, True),  # its pods are on the node: counted once, as the placement's
    (False, True, False),  # its pods are not there yet, someone else's are: both hold the node
    (True, True, False),
])
def test_a_node_holds_other_pods_plus_each_placement_whether_its_pods_exist_or_not(db, setup, scheduler, pods_seen,
                                                                                     foreign, fits):
    """One 8-GPU node; a live placement reserved 4 GPUs there; someone else's pod may hold 4 more."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=1)
        queue = add_queue(session)
        running = submit(session, queue, "running", gpus=4, state="Starting")
        session.flush()
        node = session.scalars(select(Node)).one()
        placement = Placement(job_id=running.id, cluster_id=node.cluster_id, cluster_name="eu-west", state="Starting",
                              assignments=[{"node": node.name, "replicatedJob": "workers", "pods": 1}],
                              node_usage={node.name: {GPU: 4000}})
        session.add(placement)
        session.flush()
        mine = {GPU: 4000, "pods": 1000} if pods_seen else {}
        node.used = {GPU: 4000 * (pods_seen + foreign), "pods": 1000 * (pods_seen + foreign)}
        node.placement_used = {str(placement.id): mine} if pods_seen else {}
        waiting = submit(session, queue, "next", gpus=4)
    assert scheduler.run_once().admitted == ([waiting.id] if fits else [])


def test_a_job_that_does_not_fit_stays_queued_with_a_reason_per_cluster(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        add_cluster(session, "us-east", state="Cordoned")
        add_cluster(session, "ap-south", state="NotReady")
        job = submit(session, add_queue(session), "huge", gpus=8, pods=16)
    outcome = scheduler.run_once()
    assert outcome.admitted == [] and outcome.reasons_written == 1
    with db.sessions() as session:
        stored = session.get(Job, job.id)
        assert stored.state == "Queued"
        assert stored.reason == "no cluster can take it now"
        assert stored.waiting_reasons == {"eu-west": "needs 128 GPUs; 64 GPUs free", "us-east": "cordoned",
                                          "ap-south": "not ready (not answering)"}
        assert [e.message for e in job_events(session, job.id, "Waiting")] == ["no cluster can take it now"]
        assert count(session, Placement) == 0


def test_waiting_reasons_are_stored_by_reason_and_read_back_by_cluster(db, setup, scheduler):
    """Stored grouped (a job waits for a few reasons on many clusters); a row written before reads as it is."""
    with setup() as session:
        for name in ("c", "a", "d"):
            add_cluster(session, name)
        add_cluster(session, "b", state="Cordoned")
        job, older = (submit(session, add_queue(session, name=f"q-{n}"), n, gpus=8, pods=16) for n in ("huge", "old"))
    scheduler.run_once()
    with db.sessions() as session:
        stored = session.execute(select(type_coerce(Job.waiting_reasons, JSON)).where(Job.id == job.id)).scalar_one()
        assert {reason: sorted(clusters) for reason, clusters in stored.items()} == {
            "needs 128 GPUs; 64 GPUs free": ["a", "c", "d"], "cordoned": ["b"]}
        assert list(session.get(Job, job.id).waiting_reasons.items()) == [
            ("a", "needs 128 GPUs; 64 GPUs free"), ("b", "cordoned"), ("c", "needs 128 GPUs; 64 GPUs free"),
            ("d", "needs 128 GPUs; 64 GPUs free")]
    with db.sessions() as session, session.begin():
        session.execute(update(Job).where(Job.id == older.id).values(
            waiting_reasons=type_coerce({"a": "cordoned", "b": "not ready"}, JSON)))
    with db.sessions() as session:
        assert session.get(Job, older.id).waiting_reasons == {"a": "cordoned", "b": "not ready"}


def test_stored_reasons_have_the_digest_of_the_reasons_they_store():
    """Whether a waiting job's reasons changed is read off the stored form, not made per cluster again."""
    reasons = {"a": "cordoned", "b": "needs 8 GPUs; 0 GPUs free", "c": "needs 8 GPUs; 0 GPUs free"}
    digest = reasons_digest(reasons)
    assert stored_reasons_digest({"needs 8 GPUs; 0 GPUs free": ["c", "b"], "cordoned": ["a"]}) == digest
    assert stored_reasons_digest(reasons) == digest  # a row written before reasons were stored by reason
    assert stored_reasons_digest({"needs 8 GPUs; 0 GPUs free": ["b"], "cordoned": ["a", "c"]}) != digest
    assert stored_reasons_digest({}) == stored_reasons_digest(None) == reasons_digest({})


def test_a_job_over_its_queue_quota_waits_for_quota(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session, quota_gpus=8), "big", gpus=8, pods=2)
    scheduler.run_once()
    with db.sessions() as session:
        stored = session.get(Job, job.id)
        assert stored.state == "Queued"
        assert stored.reason.startswith("queue q is at its quota of 8 GPUs")
        assert stored.waiting_reasons == {}


def test_unchanged_reasons_are_not_written_again(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "huge", gpus=8, pods=16)
    scheduler.run_once()
    job_updates = []
    listener = lambda *args: job_updates.append(args[2]) if args[2].lstrip().upper().startswith("UPDATE JOBS") else None  # noqa: E731
    event.listen(db.engine, "before_cursor_execute", listener)
    try:
        outcome = scheduler.run_once()
    finally:
        event.remove(db.engine, "before_cursor_execute", listener)
    assert outcome.reasons_written == 0 and job_updates == []
    with db.sessions() as session:
        assert len(job_events(session, job.id)) == 1


def test_a_changed_reason_is_written_with_an_event(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "huge", gpus=8, pods=16)
    scheduler.run_once()
    with setup() as session:
        add_cluster(session, "us-east", state="Cordoned")
    outcome = scheduler.run_once()
    assert outcome.reasons_written == 1
    with db.sessions() as session:
        assert session.get(Job, job.id).waiting_reasons["us-east"] == "cordoned"
        assert len(job_events(session, job.id, "Waiting")) == 1  # the summary line did not change


def _running_low_and_pending_high(setup, scheduler) -> tuple[Job, Job]:
    """A job of low priority running on a cluster it fills, and one of high priority in its `LowerPriority` queue."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=1)
        queue = add_queue(session, preemption="LowerPriority")
        low = submit(session, queue, "low", gpus=8, priority=100)
    scheduler.run_once()
    with setup() as session:
        session.get(Job, low.id).state = "Running"
        placements_of(session, low.id)[0].state = "Running"
        high = submit(session, session.get(Queue, queue.id), "high", gpus=8, priority=10_000)
    return low, high


def test_a_higher_priority_job_preempts_and_the_victim_is_marked_deleting(db, setup, scheduler):
    low, high = _running_low_and_pending_high(setup, scheduler)
    outcome = scheduler.run_once()
    assert outcome.admitted == [high.id] and outcome.preempted == 1
    with db.sessions() as session:
        [victim] = placements_of(session, low.id)
        assert victim.state == "Deleting"
        assert f"preempted by higher-priority job {high.id}" in victim.last_error
        assert session.get(Job, low.id).state == "Running"  # the propagation moves it back to Queued
        [preempted] = job_events(session, low.id, "Preempted")
        assert preempted.type == "Warning" and str(high.id) in preempted.message
        assert placements_of(session, high.id)[0].state == "Decided"


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_commit_locks_its_jobs_before_a_victims_placements_ids_ascending(db, setup, scheduler):
    """A commit that admits a job and preempts an older one, against a batch that holds the victim and its placements
    (a status event for it) and then wants the preemptor (a cancellation, say): had the commit taken the preemptor's
    row, then the victim's placements, each would hold what the other waits for. It locks both jobs first, ids
    ascending: it waits for the batch to end, then commits."""
    low, high = _running_low_and_pending_high(setup, scheduler)
    outcome = against_a_transaction_locking(db, low.id, high.id, scheduler.run_once)
    assert outcome.admitted == [high.id] and outcome.preempted == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_slice_of_reasons_locks_its_jobs_ids_ascending(db, setup):
    """Reasons come in the order the cycle decided the jobs; written so, the second job's row, then the first's, against
    a batch that locks the first, then the second (cancelling both, say), each would hold what the other waits for."""
    with setup() as session:
        queue = add_queue(session)
        first, second = (submit(session, queue, name) for name in ("first", "second"))
    with db.read() as session:
        inventory = read_inventory(session, now=EPOCH.timestamp())
    changed = [Waiting(str(second.id), "no cluster is registered"), Waiting(str(first.id), "no cluster is registered")]

    def write() -> None:
        with db.write() as session:
            write_reasons(session, inventory, changed)

    against_a_transaction_locking(db, first.id, second.id, write)
    with db.sessions() as session:
        assert [session.get(Job, job.id).reason for job in (first, second)] == ["no cluster is registered"] * 2


def test_reclaim_is_committed_with_the_preemptor_and_the_rule_in_both_jobs_events(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=2)
        q1 = add_queue(session, "q1", quota_gpus=8)
        add_queue(session, "q2", quota_gpus=8, reclaim="Any")
        own, borrowed = submit(session, q1, "own", gpus=8), submit(session, q1, "borrowed", gpus=8)
    assert scheduler.run_once().placements == 2  # q1 borrows idle q2's 8 GPUs
    with setup() as session:
        for job_id in (own.id, borrowed.id):
            session.get(Job, job_id).state = "Running"
            placements_of(session, job_id)[0].state = "Running"
            placements_of(session, job_id)[0].started_at = EPOCH + timedelta(seconds=job_id)
        back = submit(session, session.scalar(select(Queue).where(Queue.name == "q2")), "back", gpus=8)
    outcome = scheduler.run_once()
    assert outcome.admitted == [back.id] and outcome.preempted == 1
    with db.sessions() as session:
        assert placements_of(session, own.id)[0].state == "Running"
        [preempted] = job_events(session, borrowed.id, "Preempted")
        assert f"preempted by job {back.id} of queue q2" in preempted.message
        assert "reclaim within the cohort" in preempted.message
        [admitted] = job_events(session, back.id, "Admitted")
        assert admitted.message.endswith(f"; preempting job {borrowed.id} (borrowed from this queue's nominal "
                                         "quota, reclaimed)")


def test_fair_share_preemption_across_tenants_is_committed(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=2)
        early = [submit(session, add_queue(session, "early-q", tenant="early"), "a", gpus=8)]
        early.append(submit(session, session.scalar(select(Queue).where(Queue.name == "early-q")), "b", gpus=8))
    assert scheduler.run_once().placements == 2  # early holds the whole federation
    with setup() as session:
        for job in early:
            session.get(Job, job.id).state = "Running"
            placements_of(session, job.id)[0].state = "Running"
            placements_of(session, job.id)[0].started_at = EPOCH + timedelta(seconds=job.id)
        late = add_queue(session, "late-q", tenant="late", fair_share_preemption="LessThanOrEqualToFinalShare")
        wanted = [submit(session, late, "x", gpus=8), submit(session, late, "y", gpus=8)]
    outcome = scheduler.run_once()
    assert outcome.admitted == [wanted[0].id] and outcome.preempted == 1  # late's fair share is 8 of 16 GPUs
    with db.sessions() as session:
        [preempted] = job_events(session, early[1].id, "Preempted")
        # across tenants neither side learns the other's job, tenant or queue: its priority and size only
        assert preempted.message.startswith("preempted by a job of another tenant (priority 1000, 8 GPUs), whose tenant "
                                            "is below its fair share"), preempted.message
        assert f"job {wanted[0].id}" not in preempted.message and "late" not in preempted.message
        [admitted] = job_events(session, wanted[0].id, "Admitted")
        assert admitted.message.endswith("; preempting a job of another tenant (priority 1000, 8 GPUs) (its tenant above "
                                         "its fair share, this one below)"), admitted.message


@pytest.mark.parametrize("on_preemption,state", [("fail", "Failed"), ("requeue", "Running")])
def test_a_preempted_job_fails_or_requeues_as_its_annotation_says(db, setup, scheduler, on_preemption, state):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=1)
        queue = add_queue(session, preemption="LowerPriority")
        low = submit(session, queue, "low", gpus=8, priority=100,
                     annotations={"archipelago.io/on-preemption": on_preemption})
    scheduler.run_once()
    with setup() as session:
        session.get(Job, low.id).state = "Running"
        placements_of(session, low.id)[0].state = "Running"
        submit(session, session.get(Queue, queue.id), "high", gpus=8, priority=10_000)
    assert scheduler.run_once().preempted == 1
    with db.sessions() as session:
        victim = session.get(Job, low.id)
        assert victim.state == state  # requeue: the propagation moves it back to Queued once its copy is gone
        assert placements_of(session, low.id)[0].state == "Deleting"
        if state == "Failed":
            [failed] = job_events(session, low.id, "Failed")
            assert victim.reason == failed.message and "preempted by higher-priority job" in failed.message
            assert failed.message.endswith("failed, as its archipelago.io/on-preemption annotation asks")


def test_on_preemption_takes_requeue_or_fail():
    with pytest.raises(JobSetError, match="must be requeue .* or fail"):
        parse_jobset(manifest("x", annotations={"archipelago.io/on-preemption": "retry"}))


def test_a_split_job_gets_one_placement_per_part_and_one_event(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        add_cluster(session, "us-east", leaves=1)
        job = submit(session, add_queue(session), "split", parts=(("workers", 1, 4, 8), ("eval", 1, 2, 8)),
                     annotations={"archipelago.io/placement": "split"})
    scheduler.run_once()
    with db.sessions() as session:
        placements = placements_of(session, job.id)
        assert sorted(p.part for p in placements) == ["eval", "workers"]
        assert {p.generation for p in placements} == {1}
        [admitted] = job_events(session, job.id, "Admitted")
        assert admitted.message.count(" on ") == 2


def test_a_job_placed_again_gets_the_next_generation_near_its_last_cluster(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        us = add_cluster(session, "us-east")
        job = submit(session, add_queue(session), "again", gpus=8)
        session.flush()
        session.add(Placement(job_id=job.id, cluster_id=us.id, cluster_name="us-east", state="Deleted", generation=1))
    scheduler.run_once()
    with db.sessions() as session:
        placement = placements_of(session, job.id)[-1]
        assert (placement.generation, placement.cluster_name) == (2, "us-east")


@pytest.mark.parametrize("record", ["none", "another version's"])
def test_a_manifest_that_no_longer_parses_says_so(db, setup, scheduler, record):
    """A job stored before placement records were (or with another version's) is placed by its manifest."""
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "broken")
        other_version = job.placement_spec.replace('"v":3,', '"v":0,', 1)  # a record the scheduler could read but for it
        job.manifest = {**job.manifest, "kind": "Deployment"}
        job.placement_spec = None if record == "none" else other_version
    scheduler.run_once()
    with db.sessions() as session:
        assert session.get(Job, job.id).reason.startswith("its manifest cannot be placed: kind:")


def test_the_scheduler_places_a_job_by_the_record_submission_stored_not_by_its_manifest(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "recorded", gpus=8, pods=2)
        job.manifest = {**job.manifest, "kind": "Deployment"}  # never parsed again
    scheduler.run_once()
    with db.sessions() as session:
        assert session.get(Job, job.id).state == "Admitted"
        (placement,) = placements_of(session, job.id)
        assert placement.resources[GPU] == 16_000  # the record's demand


def test_cancelled_jobs_are_not_placed(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        job = submit(session, add_queue(session), "cancelled")
        job.cancel_requested_at = datetime.now(timezone.utc)
    scheduler.run_once()
    with db.sessions() as session:
        assert placements_of(session, job.id) == []


def test_the_broker_runs_the_scheduler(db, settings):
    assert "scheduler" in [service.name for service in build_services(db, settings)]


def test_an_idle_scheduler_does_not_read_the_inventory(db, setup, scheduler):
    with setup() as session:
        add_cluster(session, "eu-west")
        submit(session, add_queue(session), "done", state="Succeeded")
    statements = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(db.engine, "before_cursor_execute", listener)
    try:
        scheduler.run_once()
    finally:
        event.remove(db.engine, "before_cursor_execute", listener)
    assert not any("FROM nodes" in s for s in statements)


def test_an_unknown_score_plugin_stops_the_start_with_one_line(settings):
    from broker.store.scheduling import engine_config
    from broker.process.settings import ConfigError

    with pytest.raises(ConfigError, match="unknown placement plugins"):
        engine_config(settings.model_copy(update={"placement_score_weights": {"Nearest": 1.0}}))


def test_filters_can_be_turned_off_by_name_and_a_wrong_name_stops_the_start(db, setup, settings):
    from broker.store.scheduling import engine_config
    from broker.services.scheduler import SchedulerService
    from broker.process.settings import ConfigError

    assert "TaintToleration" not in engine_config(settings.model_copy(
        update={"placement_disabled_filters": ["TaintToleration"]})).filters
    with pytest.raises(ConfigError, match="unknown filters \\['Nearness'\\]"):
        engine_config(settings.model_copy(update={"placement_disabled_filters": ["Nearness"]}))
    with setup() as session:
        add_cluster(session, "eu-west", state="Cordoned")
        job = submit(session, add_queue(session), "anywhere", gpus=8)
    permissive = settings.model_copy(update={"placement_disabled_filters": ["ClusterState"]})
    assert SchedulerService(db, permissive).run_once().admitted == [job.id]  # cordon no longer filters


def test_a_cycle_is_counted_in_the_metrics(db, setup, scheduler):
    from broker.process.metrics import REGISTRY

    with setup() as session:
        add_cluster(session, "eu-west")
        queue = add_queue(session)
        submit(session, queue, "a", gpus=8, pods=1)
        submit(session, queue, "b", gpus=8, pods=1)
    cycles_before = REGISTRY.get_sample_value("archipelago_scheduler_cycle_seconds_count") or 0
    placed_before = REGISTRY.get_sample_value("archipelago_scheduler_placements_total") or 0
    scheduler.run_once()
    assert REGISTRY.get_sample_value("archipelago_scheduler_cycle_seconds_count") == cycles_before + 1
    assert REGISTRY.get_sample_value("archipelago_scheduler_placements_last_cycle") == 2
    assert REGISTRY.get_sample_value("archipelago_scheduler_placements_total") == placed_before + 2


def test_reasons_are_written_a_slice_per_transaction_after_the_decisions(db, setup, scheduler, monkeypatch):
    """Five jobs wait, at most two reasons a transaction (fewer if two took longer than the budget): the third slice
    fails after the decisions' commit and two slices'; the next cycle writes what is missing, and every reason and
    Waiting event is there once."""
    from broker.store.scheduling import commit as scheduler_module
    monkeypatch.setattr(scheduler_module, "REASONS_PER_TRANSACTION", 2)
    with setup() as session:
        add_cluster(session, "eu-west")
        queue = add_queue(session)
        jobs = [submit(session, queue, f"huge-{i}", gpus=8, pods=16) for i in range(5)]
    commits = []
    event.listen(db.engine, "commit", lambda connection: commits.append(1))
    real_write, writes = scheduler_module.write_reasons, []

    def failing_third(session, inventory, changed):
        writes.append(len(changed))
        if len(writes) == 3:
            raise RuntimeError("the database went away")
        real_write(session, inventory, changed)

    monkeypatch.setattr(scheduler_module, "write_reasons", failing_third)
    with pytest.raises(RuntimeError):
        scheduler.run_once()
    written = sum(writes[:2])
    assert len(writes) == 3 and max(writes) <= 2 and len(commits) == 3  # the decisions, then two slices
    with db.sessions() as session:
        stored = [session.get(Job, j.id).reason for j in jobs]
    assert stored.count("no cluster can take it now") == written and stored.count(None) == 5 - written
    monkeypatch.setattr(scheduler_module, "write_reasons", real_write)
    assert scheduler.run_once().reasons_written == 5 - written  # read again in full: only those not written
    with db.sessions() as session:
        assert all(session.get(Job, j.id).reason == "no cluster can take it now" for j in jobs)
        assert all(len(job_events(session, j.id, "Waiting")) == 1 for j in jobs)
