"""A gang's parts are bound largest pods first (broker/engine/placement/snapshot.py `ClusterIndex.bind`): by GPUs, then
CPU, then memory. Best-fit puts the small pods together on one node, so binding them first could leave no node
with room for a large one; the names would bind the small part first here."""

from __future__ import annotations

import pytest

from broker.engine.jobset import PartSpec
from broker.engine.placement.snapshot import ClusterIndex

from .fixtures import GPU, GiB, cluster, node


@pytest.mark.parametrize("resource, unit, allocatable", [
    (GPU, 1000, {"gpus": 8}),
    ("cpu", 1000, {"gpus": 0, "cpu": 8}),
    ("memory", GiB, {"gpus": 0, "memory_gib": 8}),
])
def test_the_larger_pods_of_a_gang_are_bound_first(resource, unit, allocatable):
    nodes = (node("n0", **allocatable), node("n1", **allocatable))
    small = PartSpec("a-small", 1, 2, None, {resource: 2 * unit})  # only the resource compared asks for anything
    large = PartSpec("b-large", 1, 2, None, {resource: 6 * unit})
    binding = ClusterIndex(cluster("eu", layout=(nodes, ()))).bind([small, large], [0, 1])
    assert binding is not None, "the small pods, bound first, took the room of a large one"
    assert binding.pods == {0: {"b-large": 1, "a-small": 1}, 1: {"b-large": 1, "a-small": 1}}


def test_best_fit_puts_the_pods_on_the_smallest_node_that_takes_them_all():
    nodes = (node("n0", gpus=16), node("n1", gpus=8), node("n2", gpus=4))
    gang = PartSpec("workers", 1, 1, None, {GPU: 8000})
    binding = ClusterIndex(cluster("eu", layout=(nodes, ()))).bind([gang], [0, 1, 2])
    assert binding is not None and binding.pods == {1: {"workers": 1}}
