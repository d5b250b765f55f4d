"""The HyperNode tree as the index reads it (broker/engine/placement/snapshot.py `ClusterIndex._build_hypernodes`): a
HyperNode's nodes are its own and those of every HyperNode below it, whether the parent lists the child or the
child names its parent; a cycle in bad data does not hang it."""

from __future__ import annotations

from broker.engine.placement.model import HyperNode
from broker.engine.placement.snapshot import ClusterIndex

from .fixtures import GPU, cluster, node

NODES = (node("n0"), node("n1"))


def test_a_child_that_only_names_its_parent_is_below_it():
    tree = (HyperNode("leaf", 1, "spine", (), ("n0",)), HyperNode("spine", 2, None, (), ("n1",)))
    spine = ClusterIndex(cluster("eu", layout=(NODES, tree))).hypernodes["spine"]
    assert spine.nodes == [0, 1] and spine.free[GPU] == 16_000


def test_a_cycle_in_the_tree_does_not_hang_the_index():
    tree = (HyperNode("a", 2, "b", ("b",), ("n0",)), HyperNode("b", 2, "a", ("a",), ("n1",)))
    index = ClusterIndex(cluster("eu", layout=(NODES, tree)))
    assert index.hypernodes["a"].nodes == [0, 1]
    assert index.largest_free(GPU, 2) == 16_000
