"""Anti-starvation without freezing, end to end against the simulator: a long-waiting job holds the nodes of
one HyperNode, not a whole cluster, and small jobs run beside the holds (issue #11, case 3)."""

from __future__ import annotations

import pytest

from broker.process.testing import NODE, jobset
from clusters.sim.resources import NODES

LONG = {"sim.archipelago.io/duration": "10h"}


@pytest.fixture
def scenario() -> dict:
    """Two members of two leaves of eight 8-GPU nodes."""
    return {"defaults": {"node": NODE, "nodes": 16, "topology": {"leaf": 8, "spine": 2}, "duration": "60s"},
            "clusters": [{"name": "eu-west"}, {"name": "us-east"}]}


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"placement_starvation_after": 60.0})


def test_starving_jobs_hold_one_leaf_each_and_small_jobs_run_beside_them(federation):
    """Each member half idle (someone else's 4-GPU pod on every node); two 64-GPU JobSets of 8 GPUs a pod
    fit nowhere; once they have waited past starvation_after, ten 1-GPU JobSets still run."""
    for cluster in ("eu-west", "us-east"):
        federation.sim.others_pods(cluster, {"nvidia.com/gpu": "4"})
    big = [federation.submit(jobset(f"big-{i}", parts=(("workers", 1, 8, 8),), annotations=LONG)) for i in range(2)]
    federation.step()
    federation.step(70)  # they have waited past starvation_after now
    holds = [federation.job(job)["reason"] for job in big]
    assert all(" of HyperNode leaf-" in reason and "are held for it because it has waited over" in reason
               for reason in holds), holds
    assert len({reason.split(" of HyperNode ")[1].split(" are held")[0] for reason in holds}) == 2  # one each

    small = [federation.submit(jobset(f"small-{i}", namespace="team-b", parts=(("workers", 1, 1, 1),),
                                      annotations=LONG)) for i in range(10)]
    federation.step()
    assert [federation.state(job) for job in small] == ["Running"] * 10
    assert [federation.state(job) for job in big] == ["Queued", "Queued"]
    held_nodes = set()
    for reason in holds:  # "the 8 nodes eu-west-…..… of HyperNode leaf-0 on eu-west are held for it …"
        leaf, cluster = reason.split(" of HyperNode ")[1].split(" are held")[0].split(" on ")
        member = federation.sim.cluster(cluster)
        with member.lock:
            nodes = member.list(NODES, None, f"network.archipelago.io/leaf={leaf}", None)[0]
        assert len(nodes) == 8
        held_nodes |= {(cluster, node["metadata"]["name"]) for node in nodes}
    for job in small:  # nothing of theirs went onto held nodes
        placement = federation.job(job)["placements"][0]
        nodes = {(placement["cluster"], p["spec"]["nodeName"])
                 for p in federation.sim.cluster(placement["cluster"]).pods("team-b", f"archipelago.io/job-id={job}")}
        assert nodes and not nodes & held_nodes
