"""Placement against members that behave like busy real clusters: pods appear only when a lagging control
plane gets to them, other people's pods hold nodes, and a member lost in a failover still holds its nodes
while its copy waits to be deleted (issue #11, cases 1 and 2)."""

from __future__ import annotations

import pytest

from broker.process.testing import NODE, jobset

LONG = {"sim.archipelago.io/duration": "10h"}
GPU = "nvidia.com/gpu"


@pytest.fixture
def scenario() -> dict:
    """Two members of eight 8-GPU nodes; the control plane of each gets to a new JobSet, and to its Jobs,
    30 simulated seconds late, as on a busy cluster."""
    return {"defaults": {"node": NODE, "nodes": 8, "topology": {"leaf": 8, "spine": 1}, "duration": "60s",
                         "controller_lag": "30s"},
            "clusters": [{"name": "eu-west"}, {"name": "us-east"}]}


def _pods(federation, cluster: str, job: int) -> list[dict]:
    return federation.sim.cluster(cluster).pods("team-a", f"archipelago.io/job-id={job}")


def test_pods_that_do_not_exist_yet_still_hold_their_nodes_so_nothing_is_overbooked(federation):
    """Eight nodes of 8 GPUs on eu-west, each half used by someone else's pod: 32 GPUs free. Four JobSets of
    4 pods × 4 GPUs (16 GPUs each) want it. Two fit; the other two must wait for us-east."""
    federation.sim.make_unreachable("us-east")
    assert federation.health.run_once()["us-east"] == "NotReady"
    federation.sim.others_pods("eu-west", {GPU: "4"})
    jobs = [federation.submit(jobset(f"train-{i}", parts=(("workers", 1, 4, 4),), annotations=LONG))
            for i in range(4)]
    for _ in range(3):  # three cycles while no pod of theirs exists yet: the control plane lags
        federation.step(5)
    states = [federation.state(job) for job in jobs]
    assert sorted(states) == ["Queued", "Queued", "Starting", "Starting"], states
    admitted = [job for job, state in zip(jobs, states) if state == "Starting"]
    assert all(_pods(federation, "eu-west", job) == [] for job in admitted)  # applied is not running
    waiting = federation.job(next(job for job, state in zip(jobs, states) if state == "Queued"))
    assert waiting["waiting_reasons"]["eu-west"].startswith("needs 16 GPUs")

    for job in admitted:
        federation.until_state(job, "Running")
    for job in admitted:  # the member's scheduler agrees: every pod bound and running, none left Pending
        pods = _pods(federation, "eu-west", job)
        assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
    assert [federation.state(job) for job in jobs if job not in admitted] == ["Queued", "Queued"]


def test_what_a_pod_asks_for_as_a_whole_is_what_holds_its_node(federation):
    """Pods of 1 GPU that ask, as pods, for 40 of a node's 64 CPUs (Kubernetes' pod-level resources): the member's
    scheduler binds one to a node, not eight. Eight nodes on eu-west take two JobSets of four such pods; the third
    waits for us-east, and no pod is left Pending."""
    federation.sim.make_unreachable("us-east")
    assert federation.health.run_once()["us-east"] == "NotReady"
    manifests = [jobset(f"wide-{i}", parts=(("workers", 1, 4, 1),), annotations=LONG) for i in range(3)]
    for manifest in manifests:
        manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["resources"] = {
            "requests": {"cpu": "40"}}
    jobs = [federation.submit(manifest) for manifest in manifests]
    federation.step(5)
    states = [federation.state(job) for job in jobs]
    assert sorted(states) == ["Queued", "Starting", "Starting"], states
    waiting = federation.job(jobs[states.index("Queued")])
    assert waiting["waiting_reasons"]["eu-west"] == "free capacity is fragmented: its nodes cannot hold 4 pods of 1 GPU " \
                                                    "and 40 CPUs"
    for job, state in zip(jobs, states):
        if state == "Starting":
            federation.until_state(job, "Running")
            pods = _pods(federation, "eu-west", job)
            assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
            assert len({p["spec"]["nodeName"] for p in pods}) == 4  # one a node: as the broker counted


def test_a_copy_given_up_on_a_lost_member_frees_its_queues_quota_but_not_its_nodes(federation):
    """research has a 32-GPU quota and runs a 32-GPU JobSet on one member; that member dies: the job is
    placed on the other at once. When the member comes back, its nodes were never offered to anyone
    before the old copy was deleted."""
    answer = federation.api.patch("/api/v1/queues/research", json={"nominal_quota": {GPU: "32"}})
    assert answer.status_code == 200, answer.text
    job = federation.submit(jobset("train", parts=(("workers", 1, 4, 8),), annotations=LONG))
    first = federation.until_state(job, "Running")["placements"][0]["cluster"]
    second = "us-east" if first == "eu-west" else "eu-west"

    federation.sim.make_unreachable(first)
    assert federation.health.run_once()[first] == "NotReady"
    federation.step()
    assert "FailedOver" in federation.reasons(job)
    moved = federation.until_state(job, "Running")
    assert [(p["cluster"], p["state"]) for p in moved["placements"]] == [(first, "Deleting"), (second, "Running")]
    research = federation.api.get("/api/v1/queues/research").json()
    assert research["usage"][GPU] == "32", research  # the copy on the lost member is not charged twice

    # while the lost member's copy is not confirmed gone, its nodes are not offered: a job that may only
    # run there waits, and says that the member is not ready
    pinned = federation.submit(jobset("pinned", namespace="team-b", parts=(("workers", 1, 8, 8),),
                                      annotations={**LONG, "archipelago.io/cluster-selector": f"region={first[:2]}"}))
    federation.step()
    assert federation.state(pinned) == "Queued"
    federation.sim.heal(first)
    assert federation.health.run_once()[first] == "Ready"
    federation.until_state(pinned, "Starting", "Running")
    assert [c["metadata"]["name"] for c in federation.copies(cluster=first)] == ["pinned"]
