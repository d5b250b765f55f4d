"""What no cluster could ever run, and the words that say why: named cases over empty clusters.

Each case is a cluster layout, a JobSet and the reasons `never_fits` must give per cluster (none: it could
run somewhere). The reasons are what a tenant reads in the 422 of a submission, so their words are asserted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.engine.jobset import parse_jobset
from broker.engine.placement.feasibility import empty, never_fits

from .fixtures import GPU, cluster, fabric, hard, manifest

MAINTENANCE = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
SPLIT = {"archipelago.io/placement": "split"}


def one_leaf(taint=None):
    """A cluster of one leaf of 8 nodes of 8 GPUs; every node carries `taint` if given."""
    nodes, hypernodes = fabric(leaves=1)
    return cluster("eu", (tuple(replace(n, taints=(taint,)) if taint else n for n in nodes), hypernodes))


def one_big_node_per_leaf():
    """Two leaves under one spine, each of one 8-GPU node and seven 4-GPU nodes (36 GPUs a leaf)."""
    nodes, hypernodes = fabric(leaves=2, leaves_per_spine=2)
    small = {**nodes[0].allocatable, GPU: 4_000}
    return cluster("eu", (tuple(n if n.name.endswith("-n0") else replace(n, allocatable=small) for n in nodes),
                          hypernodes))


CASES = {
    "a pod larger than any node": (
        cluster("eu"), manifest(parts=(("workers", 1, 1, 9),)),
        {"eu": "even empty, its nodes cannot hold 1 pod of 9 GPUs"}),
    "the largest part names the shape that cannot be held": (
        cluster("eu"), manifest(parts=(("launcher", 1, 1, 9), ("workers", 1, 3, 9))),
        {"eu": "even empty, its nodes cannot hold 3 pods of 9 GPUs"}),
    "a hard bound whose HyperNodes hold the GPUs but not the pods' shape": (
        cluster("eu"), manifest(parts=(("workers", 1, 2, 9),), annotations=hard(1)),
        {"eu": "even empty, no HyperNode of tier 1 or lower can hold 18 GPUs as 2 pods of 9 GPUs on its nodes"}),
    "a hard bound whose leaves hold the GPUs, and the spine the pods": (
        one_big_node_per_leaf(), manifest(parts=(("workers", 1, 2, 8),), annotations=hard(1)),
        {"eu": "even empty, no HyperNode of tier 1 or lower can hold 16 GPUs as 2 pods of 8 GPUs on its nodes"}),
    "the same gang, soft, spans the spine": (
        one_big_node_per_leaf(), manifest(parts=(("workers", 1, 2, 8),)), {}),
    "a hard bound too tight for the gang": (
        cluster("eu"), manifest(parts=(("workers", 1, 9, 8),), annotations=hard(1)),
        {"eu": "needs 72 GPUs in one tier-1 HyperNode; the largest free one has 64"}),
    "a soft gang larger than a leaf spans the spine": (
        cluster("eu"), manifest(parts=(("workers", 1, 9, 8),)), {}),
    "a split part too large for the hard bound is named": (
        cluster("eu"), manifest(parts=(("a", 1, 1, 8), ("b", 1, 9, 8)), annotations={**SPLIT, **hard(1)}),
        {"eu": "b: needs 72 GPUs in one tier-1 HyperNode; the largest free one has 64"}),
    "split parts that fit one by one but not together": (
        one_leaf(), manifest(parts=(("a", 1, 6, 8), ("b", 1, 6, 8)), annotations=SPLIT), {}),
    "a node taint that lasts refuses the node": (
        one_leaf(MAINTENANCE), manifest(),
        {"eu": "no node can take a pod of workers: 8 of 8 nodes have taint maintenance=true:NoSchedule it "
               "does not tolerate"}),
    "a tolerated node taint does not": (
        one_leaf(MAINTENANCE), manifest(tolerations=({"key": "maintenance", "operator": "Exists"},)), {}),
    "a cordon's taint passes: the node may come back": (
        one_leaf(UNSCHEDULABLE), manifest(), {}),
    "a split part refused by a taint is named": (
        one_leaf(MAINTENANCE), manifest(parts=(("a", 1, 1, 8), ("b", 1, 1, 8)), annotations=SPLIT),
        {"eu": "a: no node can take a pod of a: 8 of 8 nodes have taint maintenance=true:NoSchedule it does "
               "not tolerate"}),
}


@pytest.mark.parametrize("case", CASES)
def test_never_fits(case):
    layout, jobset, expected = CASES[case]
    assert never_fits([empty(layout)], parse_jobset(jobset)) == expected


def test_a_split_job_fits_when_every_part_fits_some_cluster():
    small, large = cluster("small", fabric(leaves=1)), cluster("large", fabric(leaves=4))
    jobset = parse_jobset(manifest(parts=(("a", 1, 1, 8), ("b", 1, 12, 8)), annotations=SPLIT))
    assert never_fits([empty(small)], jobset) == {"small": "b: needs 96 GPUs; 64 GPUs free"}
    assert never_fits([empty(small), empty(large)], jobset) == {}
