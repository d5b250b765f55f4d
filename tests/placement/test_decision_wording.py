"""How a cycle's decisions read (broker/placement/decisions.py): where a hold is, and a waiting job's lines."""

from __future__ import annotations

import pytest

from broker.placement import Hold, Waiting


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
