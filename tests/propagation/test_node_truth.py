"""Nodes as the member's kube-scheduler sees them, end to end over the simulator (issue 11, cases 4-6):
cordoned nodes are free nowhere, pods are pinned by node name within their own node affinity and pod
limits, and a JobSet no member could ever run is refused at submission with a reason per cluster."""

from __future__ import annotations

import pytest

from broker.process.testing import NODE, jobset

GPU = "nvidia.com/gpu"
HARD_LEAF = {"archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "1"}


def _pod_spec(manifest: dict) -> dict:
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _bound_nodes(federation, job: int) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in federation.sim.cluster("eu-west").pods(
        "team-a", f"archipelago.io/job-id={job}") if p["spec"].get("nodeName"))


class TestCordonedNodes:
    @pytest.fixture
    def scenario(self) -> dict:
        """18 leaves of two 8-GPU nodes; every node is cordoned but the two of leaf-9 (the last by name)."""
        nodes = [{"unschedulable": i not in (18, 19)} for i in range(36)]
        return {"clusters": [{"name": "eu-west", "node": NODE, "nodes": nodes, "topology": {"leaf": 2, "spine": 18},
                              "duration": "60s"}]}

    def test_a_hard_gang_runs_on_the_one_leaf_not_cordoned(self, federation):
        job = federation.submit(jobset("train", parts=(("workers", 1, 2, 8),), annotations=HARD_LEAF))
        federation.until_state(job, "Running")
        [placement] = federation.placements(job)
        assert placement.hypernode == "leaf-9"
        assert _bound_nodes(federation, job) == ["node-18", "node-19"]
        capacity = federation.api.get("/api/v1/clusters/eu-west").json()["capacity"][GPU]
        assert capacity["allocatable"] == "288"


class TestPinByName:
    @pytest.fixture
    def scenario(self) -> dict:
        """Hostname labels that are not the node names (as on many clouds); two H100 nodes that take one pod each."""
        def node(i: int, gen: str, pods: str) -> dict:
            return {"name": f"gpu-{i}", "labels": {"kubernetes.io/hostname": f"ip-10-0-0-{i}", "gen": gen},
                    "resources": {**NODE, "pods": pods}}
        return {"clusters": [{"name": "eu-west", "topology": {"leaf": 4, "spine": 1}, "duration": "60s",
                              "nodes": [node(0, "a100", "110"), node(1, "a100", "110"),
                                        node(2, "h100", "1"), node(3, "h100", "1")]}]}

    def test_pods_run_where_their_own_affinity_and_pod_limits_let_them(self, federation):
        manifest = jobset("train", parts=(("workers", 1, 2, 1),))
        _pod_spec(manifest)["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "In", "values": ["h100"]}]}]}}}
        job = federation.submit(manifest)
        federation.until_state(job, "Running")
        assert _bound_nodes(federation, job) == ["gpu-2", "gpu-3"]
        [copy] = federation.copies(job)
        terms = _pod_spec(copy)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "gen", "operator": "In", "values": ["h100"]}],
                          "matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
                         for name in ("gpu-2", "gpu-3")]


class TestNeverRuns:
    @pytest.fixture
    def scenario(self) -> dict:
        """One member of two leaves of four 8-GPU nodes, labelled region=eu when registered."""
        return {"clusters": [{"name": "eu-west", "node": NODE, "nodes": 8, "topology": {"leaf": 4, "spine": 2},
                              "duration": "60s"}]}

    def test_what_no_member_could_ever_run_is_refused_with_a_reason_per_cluster(self, federation):
        federation.step()  # the inventory reads the member's nodes
        submit = lambda manifest: federation.api.post("/api/v1/jobs", json=manifest,  # noqa: E731
                                                      params={"tenant": "team-a"})
        elsewhere = submit(jobset("elsewhere", annotations={"archipelago.io/cluster-selector": "region=us"}))
        assert elsewhere.status_code == 422
        assert elsewhere.headers["content-type"] == "application/problem+json"
        assert elsewhere.json()["clusters"] == {"eu-west": "labels do not match the cluster selector region=us"}
        too_wide = submit(jobset("wide", parts=(("workers", 1, 5, 8),), annotations=HARD_LEAF))
        assert too_wide.status_code == 422
        assert too_wide.json()["clusters"] == {
            "eu-west": "needs 40 GPUs in one tier-1 HyperNode; the largest free one has 32"}
        assert federation.api.get("/api/v1/jobs").json()["items"] == []

        assert federation.api.post("/api/v1/clusters/eu-west/cordon").status_code == 200
        job = federation.submit(jobset("later", parts=(("workers", 1, 4, 8),), annotations=HARD_LEAF))
        federation.step()
        assert federation.state(job) == "Queued", "a cordoned member may come back: the job waits for it"
        assert federation.api.post("/api/v1/clusters/eu-west/uncordon").status_code == 200
        federation.until_state(job, "Running")
