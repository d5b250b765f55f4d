"""How a cycle's decisions read (broker/engine/placement/decisions.py): where a hold is, a waiting job's lines, and
what a placement holds, per node and for the next cycle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.engine.placement import GPU, Hold, NodeAssignment, Placement, RunningPlacement, Waiting


@pytest.mark.parametrize("nodes, hypernode, text", [
    (("a-n0",), "leaf-3", "node a-n0 of HyperNode leaf-3 on eu-west"),
    (("a-n0", "a-n1"), "leaf-3", "nodes a-n0, a-n1 of HyperNode leaf-3 on eu-west"),
    (("a-n0", "a-n1", "a-n7"), None, "the 3 nodes a-n0..a-n7 of the cluster on eu-west"),
])
def test_a_hold_says_which_nodes_of_which_domain(nodes, hypernode, text):
    hold = Hold("j", "eu-west", hypernode, 1 if hypernode else None, nodes, {}, "32 GPUs")
    assert hold.where() == text


def test_a_waiting_job_reads_as_its_summary_then_one_line_per_cluster_by_name():
    waiting = Waiting("j", "no cluster can take it now", {"us": "cordoned", "eu": "8 GPUs short"})
    assert waiting.lines() == ["no cluster can take it now", "eu: 8 GPUs short", "us: cordoned"]
    assert Waiting("j", "queue q does not exist").lines() == ["queue q does not exist"]


PLACEMENT = Placement(
    "j", None, "eu", "leaf-0", 1,
    (NodeAssignment("n1", "workers", 2), NodeAssignment("n0", "workers", 3), NodeAssignment("n1", "launcher", 1)),
    {"n0": {GPU: 24_000}, "n1": {GPU: 24_000}}, (("block", "b0"),))


def test_a_placement_counts_its_pods_per_node_and_names_its_nodes_per_replicated_job():
    assert PLACEMENT.node_pods == {"n0": 3, "n1": 3}
    assert PLACEMENT.node_names() == ("n0", "n1")
    assert PLACEMENT.node_names("workers") == ("n0", "n1")
    assert PLACEMENT.node_names("launcher") == ("n1",)
    assert PLACEMENT.node_names("driver") == ()


def test_a_placement_is_handed_to_the_next_cycle_with_all_it_holds_and_whose_it_is():
    assert PLACEMENT.as_running(tenant="t", queue="q", priority=5, started_at=12.0, exclusive_topology="block") == (
        RunningPlacement(job_id="j", part=None, cluster="eu", hypernode="leaf-0",
                         node_usage={"n0": {GPU: 24_000}, "n1": {GPU: 24_000}}, node_pods={"n0": 3, "n1": 3},
                         tenant="t", queue="q", priority=5, started_at=12.0, exclusive_topology="block"))
    part = replace(PLACEMENT, part="workers", hypernode=None, tier=None)
    running = part.as_running(tenant="t", queue="q", priority=0, started_at=0.0)
    assert (running.part, running.hypernode, running.exclusive_topology, running.charged) == (
        "workers", None, None, True)
