"""The Spread score, off by default (ARCHIPELAGO_PLACEMENT_SCORE_WEIGHTS turns it on): the emptier cluster
first, and a split job's parts apart."""

from __future__ import annotations

from broker.engine.placement import Config, schedule
from tests.placement.fixtures import cluster, fabric, hard, job, queue, running, snapshot

SPREAD_ONLY = Config(score_weights={"Spread": 1.0})


def _clusters() -> list:
    """Two clusters of 4 leaves of 8 GPU nodes."""
    return [cluster("a", fabric("a-")), cluster("b", fabric("b-"))]


def test_the_emptier_cluster_scores_higher_whichever_its_name():
    for busy, emptier in (("a", "b"), ("b", "a")):
        taken = running("r", busy, [f"{busy}-leaf-0-n{i}" for i in range(4)])
        state = snapshot(_clusters(), [queue("q")], running=[taken])
        [placement] = schedule(state, [job(gpus=8)], SPREAD_ONLY).placements
        assert placement.cluster == emptier


def test_a_split_jobs_parts_go_apart_even_to_a_fuller_cluster():
    """Each part fills one leaf, and `hard` keeps the whole job from one place. After the first part, a is
    still the emptier (24 of 32 nodes free against b's 16), yet the second part goes to b."""
    busy = running("r", "b", [f"b-leaf-{leaf}-n{i}" for leaf in (0, 1) for i in range(8)])
    state = snapshot(_clusters(), [queue("q")], running=[busy])
    split = job(parts=(("one", 1, 8, 8), ("two", 1, 8, 8)), annotations={"archipelago.io/placement": "split",
                                                                         **hard(1)})
    placements = schedule(state, [split], SPREAD_ONLY).placements
    assert sorted((p.part, p.cluster) for p in placements) == [("one", "a"), ("two", "b")]
