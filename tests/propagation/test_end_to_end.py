"""JobSets from submission to their end on simulated members: propagation, status, cancel, preemption."""

from __future__ import annotations

import pytest

from sqlalchemy import event

from broker.process.testing import jobset
from broker.services import dispatcher
from clusters.jobsets import GENERATION_LABEL, JOB_ID_LABEL, OWNER_ANNOTATION, PLACEMENT_ID_LABEL
from tests.propagation.conftest import example, example_files


@pytest.mark.parametrize("filename", example_files())
def test_every_example_runs_to_succeeded(federation, filename):
    manifest = example(filename)
    job = federation.submit(manifest)
    federation.until_state(job, "Running")
    placements = federation.placements(job)
    copies = federation.copies(job)
    assert len(copies) == len(placements) >= 1
    for placement in placements:
        [mine] = [c for c in copies if c["metadata"]["labels"][PLACEMENT_ID_LABEL] == str(placement.id)]
        assert mine["cluster"] == placement.cluster_name
        labels = mine["metadata"]["labels"]
        assert labels[JOB_ID_LABEL] == str(job) and labels[GENERATION_LABEL] == "1"
        assert "kueue.x-k8s.io/queue-name" not in labels  # admitted by the broker, not by a member's Kueue
        assert mine["metadata"]["annotations"][OWNER_ANNOTATION] == f"archipelago/jobs/{job}"
        assert mine["metadata"]["namespace"] == manifest["metadata"]["namespace"]
        assert mine["metadata"]["managedFields"][0]["manager"] == "archipelago"
        # every pod of the copy ran on the nodes the engine chose for its ReplicatedJob
        chosen = {(a["replicatedJob"], a["node"]) for a in placement.assignments}
        pods = federation.sim.cluster(mine["cluster"]).pods(
            manifest["metadata"]["namespace"], f"jobset.sigs.k8s.io/jobset-name={mine['metadata']['name']}")
        assert pods and all((p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"], p["spec"]["nodeName"])
                            in chosen for p in pods if p["spec"].get("nodeName"))
        # and carries the broker's labels: the inventory tells the placement's pods from others' by them
        assert {(p["metadata"]["labels"][JOB_ID_LABEL], p["metadata"]["labels"][PLACEMENT_ID_LABEL])
                for p in pods} == {(str(job), str(placement.id))}
    done = federation.until_state(job, "Succeeded", seconds=30)
    assert done["status"]["terminalState"] == "Completed"
    assert done["started_at"] and done["finished_at"]
    assert {p["state"] for p in done["placements"]} == {"Succeeded"}
    reasons = federation.reasons(job)
    applied = reasons.index("Running")
    assert reasons[:2] == ["Queued", "Admitted"]
    assert reasons[2:applied] == ["Applied"] * len(placements) + ["Starting"]  # applied is not yet running
    assert reasons[-1] == "Succeeded"


def test_a_failing_jobset_runs_through_its_restarts_to_failed(federation):
    manifest = jobset("flaky", failure_policy={"maxRestarts": 2},
                      annotations={"sim.archipelago.io/fail": "workers"})
    job = federation.submit(manifest)
    failed = federation.until_state(job, "Failed", seconds=30)
    assert failed["restart_count"] == 2 and failed["status"]["restarts"] == 2
    assert "max number of restarts" in failed["reason"]
    assert [p["state"] for p in failed["placements"]] == ["Failed"]  # restarted on its member, never re-placed
    assert len(federation.copies(job)) == 1


def _two_cluster_split(name: str, **kwargs) -> dict:
    """Two parts that each fill one member: they cannot share a cluster."""
    return jobset(name, split=True, parts=(("shard-a", 2, 8, 8), ("shard-b", 2, 8, 8)), **kwargs)


def test_a_split_job_over_two_clusters_aggregates_its_parts(federation):
    job = federation.submit(_two_cluster_split("sweep", annotations={"sim.archipelago.io/duration": "60s"}))
    running = federation.until_state(job, "Running")
    assert sorted((p["part"], p["cluster"]) for p in running["placements"]) in (
        [("shard-a", "eu-west"), ("shard-b", "us-east")], [("shard-a", "us-east"), ("shard-b", "eu-west")])
    copies = {c["metadata"]["name"]: c for c in federation.copies(job)}
    assert sorted(copies) == ["sweep-shard-a", "sweep-shard-b"]
    for part in ("shard-a", "shard-b"):
        spec = copies[f"sweep-{part}"]["spec"]
        assert [r["name"] for r in spec["replicatedJobs"]] == [part]
        assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [part]}
    federation.step()
    counts = {r["name"]: r for r in federation.job(job)["status"]["replicatedJobsStatus"]}
    assert counts["shard-a"]["active"] == counts["shard-b"]["active"] == 2

    # one part done: its resources return, the job goes on
    [first] = [p for p in running["placements"] if p["part"] == "shard-a"]
    federation.sim.cluster(first["cluster"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=sweep-shard-a")
    federation.step()
    halfway = federation.job(job)
    assert halfway["state"] == "Running"
    assert {p["part"]: p["state"] for p in halfway["placements"]} == {"shard-a": "Succeeded", "shard-b": "Running"}
    counts = {r["name"]: r for r in halfway["status"]["replicatedJobsStatus"]}
    assert (counts["shard-a"]["succeeded"], counts["shard-b"]["succeeded"]) == (2, 0)

    done = federation.until_state(job, "Succeeded", seconds=30)
    counts = {r["name"]: r["succeeded"] for r in done["status"]["replicatedJobsStatus"]}
    assert counts == {"shard-a": 2, "shard-b": 2}
    assert "success policy (All) holds" in done["reason"]


def test_a_split_job_succeeds_when_its_target_part_does_and_the_rest_is_removed(federation):
    manifest = _two_cluster_split("driver", success={"operator": "All", "targetReplicatedJobs": ["shard-a"]},
                                  annotations={"sim.archipelago.io/duration": "1h"})
    job = federation.submit(manifest)
    running = federation.until_state(job, "Running")
    [target] = [p for p in running["placements"] if p["part"] == "shard-a"]
    federation.sim.cluster(target["cluster"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=driver-shard-a")
    done = federation.until_state(job, "Succeeded")
    federation.step()
    states = {p["part"]: p["state"] for p in federation.job(job)["placements"]}
    assert states == {"shard-a": "Succeeded", "shard-b": "Deleted"}
    assert [c["metadata"]["name"] for c in federation.copies(job)] == ["driver-shard-a"]
    assert done["status"]["terminalState"] == "Completed"


def test_a_failed_split_part_is_replaced_alone_and_counts_toward_max_restarts(federation):
    job = federation.submit(_two_cluster_split("retry", failure_policy={"maxRestarts": 1},
                                               annotations={"sim.archipelago.io/duration": "1h"}))
    running = federation.until_state(job, "Running")
    other = next(p for p in running["placements"] if p["part"] == "shard-b")
    first = next(p for p in running["placements"] if p["part"] == "shard-a")

    federation.sim.cluster(first["cluster"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=retry-shard-a",
                                                         succeeded=False)
    federation.step()
    assert "PartRestarting" in federation.reasons(job)
    again = federation.until_state(job, "Running")
    assert again["restart_count"] == 1
    by_part = {}
    for p in again["placements"]:
        by_part.setdefault(p["part"], []).append((p["generation"], p["state"]))
    assert by_part == {"shard-a": [(1, "Failed"), (2, "Running")], "shard-b": [(1, "Running")]}
    assert next(p for p in again["placements"] if p["part"] == "shard-b")["id"] == other["id"]  # untouched
    live = [c for c in federation.copies(job) if c["metadata"]["labels"][GENERATION_LABEL] == "2"]
    assert [c["metadata"]["name"] for c in live] == ["retry-shard-a"]

    second = next(p for p in again["placements"] if p["part"] == "shard-a" and p["generation"] == 2)
    federation.sim.cluster(second["cluster"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=retry-shard-a",
                                                          succeeded=False)
    failed = federation.until_state(job, "Failed")
    assert failed["reason"] == "shard-a failed beyond its restarts (1 of 1)"
    federation.run_until(lambda: [p.state for p in federation.placements(job) if p.part == "shard-b"] == ["Deleted"])
    assert {(p["part"], p["generation"]): p["state"] for p in federation.job(job)["placements"]} == {
        ("shard-a", 1): "Failed", ("shard-a", 2): "Failed", ("shard-b", 1): "Deleted"}
    assert not [c for c in federation.copies(job) if c["metadata"]["name"] == "retry-shard-b"]


def test_cancel_removes_every_copy(federation):
    job = federation.submit(_two_cluster_split("doomed", annotations={"sim.archipelago.io/duration": "1h"}))
    federation.until_state(job, "Running")
    assert len(federation.copies(job)) == 2
    answer = federation.api.delete(f"/api/v1/jobs/{job}")
    assert answer.status_code == 202
    assert federation.state(job) == "Running"  # until every copy is gone
    cancelled = federation.until_state(job, "Cancelled")
    assert federation.copies(job) == []
    assert {p["state"] for p in cancelled["placements"]} == {"Deleted"}
    assert federation.sim.cluster("eu-west").pods("team-a") == [] == federation.sim.cluster("us-east").pods("team-a")
    assert federation.reasons(job)[-1] == "Cancelled"


def test_members_refusing_the_jobset_fail_the_job_with_their_messages(federation):
    manifest = jobset("refused")
    manifest["spec"]["coordinator"] = {"replicatedJob": "nobody"}  # the broker lets the member judge this
    job = federation.submit(manifest)
    failed = federation.until_state(job, "Failed")
    assert failed["reason"].startswith("every member it could run on refused it (eu-west: ")
    assert failed["reason"].count("spec.coordinator.replicatedJob: Invalid value") == 2  # each member's words
    assert [p["state"] for p in failed["placements"]] == ["Deleted", "Deleted"]  # asked first: nothing made there
    assert federation.copies(job) == []


def test_placements_go_to_applying_a_slice_per_transaction_all_before_any_member_call(federation, monkeypatch):
    """After a new leader's first cycle thousands move at once: one transaction held the write lock from every
    submission meanwhile (bench/leader_api.py). Each slice is committed, and all of them before the first apply."""
    start_apply, slices, commits = dispatcher.start_apply, [], []

    def each_slice(session, works):
        slices.append((len(commits), len(works), len(federation.copies())))
        return start_apply(session, works)

    monkeypatch.setattr(dispatcher, "start_apply", each_slice)
    monkeypatch.setattr(dispatcher, "APPLIES_PER_TRANSACTION", 5)
    jobs = [federation.submit(jobset(f"small-{i}", parts=(("workers", 1, 1, 1),))) for i in range(24)]
    federation.scheduler.run_once()

    def committed(_connection) -> None:
        commits.append(1)

    event.listen(federation.db.engine, "commit", committed)
    try:
        federation.dispatcher.run_once()
    finally:
        event.remove(federation.db.engine, "commit", committed)
    assert [works for _, works, _ in slices] == [5, 5, 5, 5, 4]
    committed_before = [before for before, _, _ in slices]
    assert committed_before == sorted(set(committed_before))  # each slice after the one before committed
    assert [copies for _, _, copies in slices] == [0] * len(slices)
    assert len(federation.copies()) == len(jobs)
