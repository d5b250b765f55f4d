"""Which nodes a part's pods may use is worked out once per kind of constraint and cached
(broker/engine/placement/snapshot.py `ClusterIndex.eligible`): parts with different tolerations, node selectors or
required node affinity never share an answer, whichever was asked first."""

from __future__ import annotations

from broker.engine.jobset import POD_SLOT, PartSpec
from broker.engine.placement.snapshot import ClusterIndex
from clusters.rules.labels import NodeSelectorTerm

from .fixtures import GPU, cluster, node

MAINTENANCE = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
POD = {GPU: 8000, POD_SLOT: 1000}


def test_parts_with_different_constraints_get_their_own_nodes_whichever_is_asked_first():
    nodes = (node("n0", labels={"pool": "a"}), node("n1", labels={"pool": "b"}, taints=[MAINTENANCE]))
    index = ClusterIndex(cluster("eu", layout=(nodes, ())))
    plain = PartSpec("plain", 1, 1, None, POD)
    tolerant = PartSpec("tolerant", 1, 1, None, POD, tolerations=(
        {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},))
    pool_b = PartSpec("pool-b", 1, 1, None, POD, tolerations=tolerant.tolerations, node_selector={"pool": "b"})
    selective = PartSpec("selective", 1, 1, None, POD, node_selector={"pool": "b"})
    nowhere = PartSpec("nowhere", 1, 1, None, POD, node_affinity=(NodeSelectorTerm(),))  # a term matching no node
    assert [list(index.eligible(p)) for p in (plain, tolerant, pool_b, selective, nowhere)] == [
        [1, 0], [1, 1], [0, 1], [0, 0], [0, 0]]
    assert [index.eligible_count(p) for p in (plain, tolerant, pool_b, selective, nowhere)] == [1, 2, 1, 0, 0]
