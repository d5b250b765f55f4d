"""The topology search tries at most `max_candidates` HyperNodes per tier, then the next tier
(broker/engine/placement/snapshot.py `ClusterIndex.search`): a HyperNode counts when its free GPUs hold the gang on the
nodes it may use but are too fragmented to bind it; one whose nodes the gang may not use is skipped uncounted.

Three leaves of four 8-GPU nodes (leaf-0 and leaf-1 under spine-0, leaf-2 under spine-1); every gang asks for
16 GPUs under a hard bound of tier 2, so each leaf below has 16 GPUs free and is tried tightest first, by name.
"""

from __future__ import annotations

import pytest

from broker.engine.jobset import POD_SLOT, PartSpec
from broker.engine.placement.snapshot import ClusterIndex

from .fixtures import GPU, cluster, fabric

FRAGMENTED = (4, 4, 4, 4)  # GPUs in use per node: 16 free, no node with 8
TWO_WHOLE_NODES = (8, 8, 0, 0)
FULL = (8, 8, 8, 8)


def placed_in(leaves, parts, max_candidates, labels=lambda leaf, i: {}):
    index = ClusterIndex(cluster("eu", fabric(leaves=3, nodes_per_leaf=4, node_labels=labels)))
    index.apply({4 * leaf + i: {GPU: used * 1000} for leaf, per_node in enumerate(leaves)
                 for i, used in enumerate(per_node) if used}, {}, (), +1)
    demand = {}
    for part in parts:
        for resource, amount in part.requests.items():
            demand[resource] = demand.get(resource, 0) + amount
    fit = index.search(parts, demand, 2, max_candidates, bind=True)
    return fit and fit.hypernode.name


def gang(name="workers", pods=2, selector=None):
    return PartSpec(name, 1, pods, None, {GPU: 8000, POD_SLOT: 1000}, node_selector=selector or {})


@pytest.mark.parametrize("leaves, max_candidates, where", [
    ((FRAGMENTED, TWO_WHOLE_NODES, FULL), 2, "leaf-1"),  # the second try binds
    ((FRAGMENTED, FRAGMENTED, TWO_WHOLE_NODES), 2, "spine-1"),  # two tries spent: leaf-2 is never tried
    ((FRAGMENTED, FRAGMENTED, TWO_WHOLE_NODES), 3, "leaf-2"),
])
def test_each_fragmented_hypernode_tried_counts_then_the_search_moves_up_a_tier(leaves, max_candidates, where):
    assert placed_in(leaves, [gang()], max_candidates) == where


def test_a_hypernode_whose_usable_nodes_hold_the_gang_by_their_totals_counts_as_tried():
    """Only leaf-0 and leaf-1 have the h100 label the gang selects; leaf-0's 16 free GPUs are fragmented."""
    h100 = lambda leaf, i: {"gpu": "h100"} if leaf != "leaf-2" else {}
    assert placed_in((FRAGMENTED, TWO_WHOLE_NODES, FULL), [gang(selector={"gpu": "h100"})], 1, h100) == "spine-0"


def test_a_hypernode_none_of_whose_nodes_a_part_may_use_is_skipped_without_counting():
    """leaf-0 has two whole nodes free, but not one of pool x, which the second part selects."""
    pool_x = lambda leaf, i: {"pool": "x"} if leaf == "leaf-1" else {}
    parts = [gang("any", pods=1), gang("picky", pods=1, selector={"pool": "x"})]
    assert placed_in((TWO_WHOLE_NODES, TWO_WHOLE_NODES, FULL), parts, 1, pool_x) == "leaf-1"


def test_the_tightest_hypernode_is_found_whatever_its_name_starts_with():
    """HyperNode names may start with a digit; the exact fit still comes before a roomier HyperNode."""
    index = ClusterIndex(cluster("eu", fabric(prefix="1-", leaves=2)))
    index.apply({i: {GPU: 8000} for i in range(6)}, {}, (), +1)  # 1-leaf-0: 16 GPUs free, 1-leaf-1: 64
    part = gang()
    assert index.search([part], part.requests, 1, 10, bind=True).hypernode.name == "1-leaf-0"
