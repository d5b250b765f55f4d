"""A scheduler keeps each cluster's index as built (`Snapshot(..., built=...)`) and works on a copy each cycle: the
cycles decide as on indexes built anew, and what they take never reaches the kept ones."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from broker.engine.placement import Config, Snapshot, schedule
from broker.engine.placement.snapshot import ClusterIndex
from tests.placement.fixtures import GPU, cluster, fabric
from tests.placement.test_parked_jobs import QUEUES, arrivals, as_running, decided

CLUSTERS = [cluster("a", fabric("a-", leaves=2, nodes_per_leaf=2)),
            cluster("b", fabric("b-", leaves=1, nodes_per_leaf=4))]


def state(index: ClusterIndex) -> tuple:
    """What a cycle takes and gives back in an index."""
    return (index.free, index.free_total, index.broker_pods, index.locks, index.by_tier,
            {name: (h.free, h.allocatable) for name, h in index.hypernodes.items()},
            [[h.name for h in states] for states in index.node_hypernodes])


def test_a_copy_has_every_attribute_of_its_index_and_its_own_free_amounts():
    index = ClusterIndex(CLUSTERS[0])
    twin = index.copy()
    assert vars(twin).keys() == vars(index).keys() and state(twin) == state(index)
    twin.apply({0: {GPU: 8000}}, {0: 1}, [("leaf", "a-leaf-0")], +1)  # one GPU node, its leaf held exclusively
    assert state(index) == state(ClusterIndex(CLUSTERS[0])) != state(twin)
    assert twin.node_hypernodes[0][0] is twin.hypernodes[twin.node_hypernodes[0][0].name]


@pytest.mark.parametrize("seed", range(20))
def test_cycles_on_kept_indexes_decide_as_on_new_ones(seed):
    """Cycles over a changing federation (placements added and ended, a cluster whose nodes changed, one that left
    and came back), starving every other cycle: each decides on kept indexes as on new ones, and the kept ones stay
    as built."""
    rnd, built = random.Random(seed), {}
    clusters, running, jobs = list(CLUSTERS), [], {}
    for cycle in range(6):
        now, config = (2000.0, Config(max_holds=2)) if cycle % 2 else (60.0, Config())
        pending = arrivals(rnd, 6, 10.0 * cycle)
        jobs.update((j.id, j) for j in pending)
        kept = schedule(Snapshot(clusters, QUEUES, (), running, now, built), pending, config)
        new = schedule(Snapshot(clusters, QUEUES, (), running, now), pending, config)
        assert decided(kept) == decided(new) and kept.waiting == new.waiting
        assert {name: state(index) for name, index in built.items()} == \
            {c.name: state(ClusterIndex(c)) for c in clusters}
        running = [r for r in running if rnd.random() < 0.7] + as_running(kept, jobs, now)
        change = rnd.choice(["none", "nodes", "leaves"])
        if change == "nodes":  # a new Cluster object: its index is built again
            clusters[-1] = replace(clusters[-1], nodes=tuple(replace(n, allocatable={**n.allocatable, GPU: 4000})
                                                             for n in clusters[-1].nodes))
        elif change == "leaves":
            clusters = clusters[:1] if len(clusters) == 2 else list(CLUSTERS)
            running = [r for r in running if r.cluster in {c.name for c in clusters}]
