"""A part's verdict is its member's: a JobSet that ends Completed is a succeeded part whatever its counts say,
and a job whose parts all have a verdict is settled, never placed again (members whose JobSet controller
writes no per-ReplicatedJob counts, or writes them one update after the condition)."""

from __future__ import annotations

import pytest

from broker.process.testing import SCENARIO, jobset

DURATION = {"sim.archipelago.io/duration": "60s"}


@pytest.fixture(params=["omitted", "lagging"])
def scenario(request) -> dict:
    return {**SCENARIO, "defaults": {**SCENARIO["defaults"], "jobset_counts": request.param}}


def _two_cluster_split(name: str) -> dict:
    """Two parts that each fill one member: one part on each."""
    return jobset(name, split=True, parts=(("shard-a", 2, 8, 8), ("shard-b", 2, 8, 8)), annotations=DURATION)


def _finishes_once(federation, job: int) -> dict:
    done = federation.until_state(job, "Succeeded", "Failed", seconds=30)
    for _ in range(3):  # the counts that lag the verdict arrive; nothing else may happen
        federation.step(5)
    final = federation.job(job)
    assert (done["state"], final["state"]) == ("Succeeded", "Succeeded"), [e["message"] for e in final["events"]]
    reasons = federation.reasons(job)
    assert "Requeued" not in reasons and reasons.count("Applied") == len(final["placements"])
    assert reasons[-1] == "Succeeded"
    return final


def test_a_split_job_whose_parts_completed_without_counts_succeeds_once(federation, sim):
    job = federation.submit(_two_cluster_split("sweep"))
    final = _finishes_once(federation, job)
    assert sorted((p["part"], p["generation"], p["state"]) for p in final["placements"]) == [
        ("shard-a", 1, "Succeeded"), ("shard-b", 1, "Succeeded")]
    assert {p["cluster"] for p in final["placements"]} == {"eu-west", "us-east"}
    assert sorted(c["metadata"]["name"] for c in federation.copies(job)) == ["sweep-shard-a", "sweep-shard-b"]
    assert "success policy (All) holds" in final["reason"]
    counts = {r["name"]: r["succeeded"] for r in final["status"]["replicatedJobsStatus"]}
    if sim.cluster("eu-west").jobset_counts == "lagging":  # the counts came after the verdict, and are shown
        assert counts == {"shard-a": 2, "shard-b": 2}
    else:
        assert counts == {"shard-a": 0, "shard-b": 0}


def test_a_split_job_with_any_succeeds_on_its_target_parts_verdict(federation):
    manifest = _two_cluster_split("anyone")
    manifest["spec"]["successPolicy"] = {"operator": "Any", "targetReplicatedJobs": ["shard-b"]}
    manifest["metadata"]["annotations"]["sim.archipelago.io/duration"] = "1h"
    job = federation.submit(manifest)
    running = federation.until_state(job, "Starting", "Running")  # without counts no member says "ready"
    [target] = [p for p in running["placements"] if p["part"] == "shard-b"]
    federation.sim.cluster(target["cluster"]).finish_pods("team-a", "jobset.sigs.k8s.io/jobset-name=anyone-shard-b")
    done = federation.until_state(job, "Succeeded")
    assert done["reason"].startswith("success policy (Any) holds")
    federation.run_until(lambda: [p.state for p in federation.placements(job) if p.part == "shard-a"] == ["Deleted"])
    assert {p["part"]: p["state"] for p in federation.job(job)["placements"]} == {"shard-a": "Deleted",
                                                                                 "shard-b": "Succeeded"}


def test_a_whole_job_that_completed_without_counts_succeeds_once(federation):
    job = federation.submit(jobset("whole", parts=(("workers", 2, 2, 8), ("driver", 1, 1, 0)), annotations=DURATION))
    final = _finishes_once(federation, job)
    assert [(p["generation"], p["state"]) for p in final["placements"]] == [(1, "Succeeded")]
    assert len(federation.copies(job)) == 1
