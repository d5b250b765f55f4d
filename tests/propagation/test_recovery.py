"""Members that fail: failover and the stale copy's deletion, members answering 500, copies changed by others,
and the status watch's resync."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event, select

from broker.process.testing import jobset
from broker.services import dispatcher, status
from broker.store.db.models import Event
from broker.store.db.session import WRITE_LOCK
from clusters.sim.resources import JOBSETS

LONG = {"sim.archipelago.io/duration": "1h"}


def _other(cluster: str) -> str:
    return "us-east" if cluster == "eu-west" else "eu-west"


def test_an_unreachable_member_fails_over_and_its_stale_copy_goes_before_anything_starts_there(federation):
    job = federation.submit(jobset("train", annotations=LONG))
    first = federation.until_state(job, "Running")["placements"][0]
    down = first["cluster"]
    federation.sim.make_unreachable(down)
    assert federation.health.run_once()[down] == "NotReady"

    federation.step()
    assert "FailedOver" in federation.reasons(job)
    moved = federation.until_state(job, "Running")
    assert [(p["cluster"], p["generation"], p["state"]) for p in moved["placements"]] == [
        (down, 1, "Deleting"), (_other(down), 2, "Running")]
    assert any("not ready" in e["message"] and "failing over" in e["message"] for e in moved["events"])
    assert {c["cluster"] for c in federation.copies(job)} == {down, _other(down)}  # the old one is out of reach

    # a job that may only run on the member that is down waits for it
    region = {"eu-west": "eu", "us-east": "us"}[down]
    pinned = federation.submit(jobset("pinned", annotations={**LONG, "archipelago.io/cluster-selector": f"region={region}"}))
    federation.step()
    assert federation.state(pinned) == "Queued"

    federation.sim.heal(down)
    assert federation.health.run_once()[down] == "Ready"
    federation.until_state(pinned, "Running")
    assert [c["cluster"] for c in federation.copies(job)] == [_other(down)]
    assert [p["state"] for p in federation.job(job)["placements"]] == ["Deleted", "Running"]
    with federation.db.sessions() as session:
        deleted = session.scalar(select(Event.id).where(Event.object_id == str(job), Event.reason == "Deleted"))
        applied = session.scalar(select(Event.id).where(Event.object_id == str(pinned), Event.reason == "Applied"))
    assert deleted < applied  # the stale copy went before anything new started on that member


def test_a_member_answering_errors_delays_but_loses_nothing(federation):
    federation.dispatcher.run_once()  # the dispatcher has met (swept) both members
    for name in federation.sim.cluster_names:
        federation.sim.make_failing(name, 500)
    job = federation.submit(jobset("patient"))
    for _ in range(4):
        federation.step(10)
    [placement] = federation.placements(job)
    assert placement.state == "Applying" and placement.attempts >= 3 and "500" in placement.last_error
    assert federation.copies(job) == []
    assert federation.reasons(job).count("MemberRetrying") == 1  # said once, not at every try

    # 429 Too Many Requests, Retry-After: 0: retried at once (the waits are test_member_client.py's to check)
    federation.sim.throttle(placement.cluster_name, retry_after=0, seconds=3600)
    federation.step(60)
    assert "429" in federation.placements(job)[0].last_error
    federation.sim.throttle(placement.cluster_name, retry_after=0, seconds=0)
    for name in federation.sim.cluster_names:
        federation.sim.heal(name)
    done = federation.until_state(job, "Succeeded", seconds=60)
    assert [(p["generation"], p["state"]) for p in done["placements"]] == [(1, "Succeeded")]
    assert len(federation.copies(job)) == 1


def _edit_member(federation, cluster: str, edit) -> None:
    member = federation.sim.cluster(cluster)
    with member.lock:
        edit(member)


def test_a_copy_deleted_by_someone_else_while_the_broker_only_lists_is_failed_not_run_again(federation):
    """The stepped federation lists its members' copies: a list that misses a running copy cannot tell whether it
    finished in between (the watch's DELETED event can: tests/propagation/test_watch_deletions.py)."""
    job = federation.submit(jobset("fragile", annotations=LONG))
    [placement] = federation.until_state(job, "Running")["placements"]
    _edit_member(federation, placement["cluster"], lambda m: m.delete_object(JOBSETS, "team-a", "fragile", "Foreground"))
    federation.step()
    detail = federation.job(job)
    assert [e["reason"] for e in detail["events"] if e["type"] == "Warning"] == ["CopyVanished", "Failed"]
    assert detail["state"] == "Failed" and "whether it finished is not known" in detail["reason"]
    assert [(p["id"], p["state"]) for p in detail["placements"]] == [(placement["id"], "Failed")]
    federation.step()
    assert federation.copies(job) == []  # nothing applied again
    assert [e["reason"] for e in federation.job(job)["events"]].count("Applied") == 1


def test_a_copy_changed_by_someone_else_is_reported_and_applied_again(federation):
    job = federation.submit(jobset("tampered", annotations=LONG))
    [placement] = federation.until_state(job, "Running")["placements"]
    _edit_member(federation, placement["cluster"], lambda m: m.patch(
        JOBSETS, "team-a", "tampered", "merge", {"spec": {"suspend": True}}, "kubectl"))
    federation.step()
    drift = [e["message"] for e in federation.job(job)["events"] if e["reason"] == "Drift"]
    assert drift == [f"JobSet team-a/tampered was changed on {placement['cluster']} by someone else "
                     "(generation 1 → 2); applying it again"]
    [copy] = federation.copies(job)
    assert {f["manager"] for f in copy["metadata"]["managedFields"]} == {"archipelago", "kubectl"}
    [again] = federation.placements(job)
    assert (again.id, again.status["appliedGeneration"]) == (placement["id"], 2)  # the same copy, re-applied
    federation.step()
    assert [e["reason"] for e in federation.job(job)["events"]].count("Drift") == 1  # reported once


def test_a_copy_deleted_after_the_job_was_cancelled_is_not_recreated(federation):
    job = federation.submit(jobset("gone", annotations=LONG))
    [placement] = federation.until_state(job, "Running")["placements"]
    federation.api.delete(f"/api/v1/jobs/{job}")
    federation.until_state(job, "Cancelled")
    federation.step()
    assert federation.copies(job) == []


def test_the_deleting_crash_hook_fires_whichever_loop_committed_the_step(federation, monkeypatch):
    """The crash tests kill the broker at `deleting` (Deleting committed, the member untouched). A status
    that comes after a cancel makes the status loop settle the job, and so commit Deleting, before the
    dispatcher's pass does: the hook must fire all the same, before the copy is touched."""
    job = federation.submit(jobset("cancelled", annotations=LONG))
    federation.until_state(job, "Running")
    assert federation.api.delete(f"/api/v1/jobs/{job}").status_code == 202
    [copy] = federation.copies(job)
    member = federation.sim.cluster(copy["cluster"])
    with member.lock:  # the member's status moves on ...
        member.patch(JOBSETS, "team-a", "cancelled", "merge", {"status": {"conditions": [
            {"type": "Progressing", "status": "True", "reason": "Test", "message": "moved on",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, "test", subresource="status")
    federation.status.run_once()  # ... and the status loop, not the dispatcher, commits the step
    assert [p.state for p in federation.placements(job)] == ["Deleting"]

    class Killed(Exception):
        pass

    def crash_point(step: str) -> None:
        if step == "deleting":
            raise Killed
    monkeypatch.setattr(dispatcher, "crash_point", crash_point)
    with pytest.raises(Killed):
        federation.dispatcher.run_once()
    assert len(federation.copies(job)) == 1


def _wait(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def watching(federation, settings, db):
    from broker.services.status import StatusService
    service = StatusService(db, settings, federation.members, now=federation.now)
    yield service
    service.stop()


def test_the_status_watch_follows_members_and_relists_after_410(federation, watching):
    job = federation.submit(jobset("watched", annotations=LONG))
    federation.scheduler.run_once()
    federation.dispatcher.run_once()
    watching.run_once()  # starts one watch per member; no polling from here on
    _wait(lambda: federation.state(job) == "Running")
    [placement] = federation.job(job)["placements"]
    member = placement["cluster"]

    # the member forgets its history and drops the stream: the watch's version is gone, it lists again
    federation.sim.cluster(member).compact()
    federation.sim.app.close_streams(member)
    federation.sim.cluster(member).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=watched")
    _wait(lambda: federation.state(job) == "Succeeded")
    assert federation.job(job)["status"]["terminalState"] == "Completed"


def test_a_copy_that_ends_while_its_watch_is_down_is_recorded_finished_by_the_relist_and_runs_once(federation,
                                                                                                    watching):
    """The JobSet asks `ttlSecondsAfterFinished: 0`; it ends while the member's watch is down and its history is
    compacted (410 Gone): the relist finds the copy, which carries no TTL, finished."""
    manifest = jobset("relisted", annotations={"sim.archipelago.io/duration": "60s"})
    manifest["spec"]["ttlSecondsAfterFinished"] = 0
    job = federation.submit(manifest)
    federation.scheduler.run_once()
    federation.dispatcher.run_once()
    watching.run_once()
    _wait(lambda: federation.state(job) == "Running")
    [placement] = federation.job(job)["placements"]
    members = frozenset(p.cluster_id for p in federation.placements(job))
    for watch in watching.retarget(frozenset()):  # the watches go down...
        watch.join(10)
    federation.sim.advance(61)  # ...while it ends
    federation.sim.settle()
    federation.sim.settle()
    federation.sim.cluster(placement["cluster"]).compact()
    watching.retarget(members)  # back: a list first
    watching.run_once()
    _wait(lambda: federation.state(job) in ("Succeeded", "Failed"))
    assert federation.state(job) == "Succeeded"
    federation.dispatcher.run_once()
    assert federation.copies(job) == [] and federation.reasons(job).count("Applied") == 1


def test_watch_events_the_database_refuses_are_learned_again_from_a_list(federation, watching, monkeypatch, caplog):
    """The recorder writes the watches' events in batches; a batch that fails stops its members' watches, and the
    next pass starts them again with a list, which tells what the lost events told."""
    job = federation.submit(jobset("watched", annotations=LONG))
    federation.scheduler.run_once()
    federation.dispatcher.run_once()
    watching.run_once()
    _wait(lambda: federation.state(job) == "Running")
    [placement] = federation.job(job)["placements"]

    refused = []
    lock = status.lock_reported

    def refuse_watch_events(session, reports, *args):  # the lists, in the watches' own threads, go through
        if threading.current_thread().name == "status-recorder":
            refused.append(list(reports))
            raise RuntimeError("the database is away")
        return lock(session, reports, *args)
    monkeypatch.setattr(status, "lock_reported", refuse_watch_events)
    federation.sim.cluster(placement["cluster"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=watched")
    _wait(lambda: refused)
    assert federation.state(job) == "Running"

    def relisted() -> bool:
        watching.run_once()  # a pass: the watches stopped start again, with a list
        return federation.state(job) == "Succeeded"
    _wait(relisted)
    assert "recording watch events failed" in caplog.text


def test_a_split_part_lost_with_its_member_is_placed_again_alone_and_the_requeue_names_it(federation):
    job = federation.submit(jobset("halves", split=True, parts=(("shard-a", 2, 8, 8), ("shard-b", 2, 8, 8)),
                                   annotations=LONG))
    running = federation.until_state(job, "Running")
    where = {p["part"]: p["cluster"] for p in running["placements"]}
    federation.sim.cluster(where["shard-a"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=halves-shard-a")
    federation.step()
    assert {p["part"]: p["state"] for p in federation.job(job)["placements"]} == {"shard-a": "Succeeded",
                                                                                 "shard-b": "Running"}
    federation.sim.make_unreachable(where["shard-b"])
    assert federation.health.run_once()[where["shard-b"]] == "NotReady"
    federation.step()
    [failed_over] = [e for e in federation.job(job)["events"] if e["reason"] == "FailedOver"]
    assert failed_over["message"].startswith(f"shard-b on {where['shard-b']}: member {where['shard-b']} not ready")

    moved = federation.until_state(job, "Running")
    assert sorted((p["part"], p["generation"], p["cluster"], p["state"]) for p in moved["placements"]) == [
        ("shard-a", 1, where["shard-a"], "Succeeded"), ("shard-b", 1, where["shard-b"], "Deleting"),
        ("shard-b", 2, where["shard-a"], "Running")]  # the finished part is not run again


def test_a_dispatcher_pass_with_nothing_to_cancel_or_fail_over_takes_no_write_lock(federation):
    """Step 1 reads first: on SQLite its query scans the backlog every pass, and under the write lock every
    submission waited for it."""
    job = federation.submit(jobset("running", annotations=LONG))
    federation.until_state(job, "Running")
    writes: list[bool] = []
    engine = federation.db.engine

    def began(connection) -> None:
        writes.append(bool(connection.get_execution_options().get(WRITE_LOCK)))

    event.listen(engine, "begin", began)
    try:
        federation.dispatcher.run_once()
        assert writes and not any(writes)  # it read, and wrote nothing
        federation.api.delete(f"/api/v1/jobs/{job}")
        writes.clear()
        federation.dispatcher.run_once()  # a cancel to carry out: the same pass writes
        assert any(writes)
    finally:
        event.remove(engine, "begin", began)
    assert {p["state"] for p in federation.job(job)["placements"]} <= {"Deleting", "Deleted"}
