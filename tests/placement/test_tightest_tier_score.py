"""The TightestTier score: the cluster where the job's pods fit in the lowest HyperNode tier wins."""

from __future__ import annotations

from broker.engine.placement import Config, schedule
from tests.placement.fixtures import cluster, fabric, job, queue, running, snapshot


def test_a_job_goes_where_it_fits_one_leaf_rather_than_one_spine():
    # on a, every leaf has one free node left: two pods only fit a spine (tier 2); on b, a leaf (tier 1)
    busy = running("r", "a", [f"a-leaf-{leaf}-n{i}" for leaf in range(4) for i in range(7)])
    state = snapshot([cluster("a", fabric("a-")), cluster("b", fabric("b-"))], [queue("q")], running=[busy])
    [placement] = schedule(state, [job(gpus=8, pods=2)], Config(score_weights={"TightestTier": 1.0})).placements
    assert (placement.cluster, placement.tier) == ("b", 1)
