"""A dry run names every cluster, even when the job is stopped before any cluster is looked at
(broker/engine/placement/cycle/ `dry_run`)."""

from __future__ import annotations

from broker.engine.placement import ClusterVerdict, dry_run, schedule
from tests.placement.fixtures import GPU, cluster, fabric, hard, job, queue, snapshot


def test_a_job_over_its_quota_gets_a_verdict_for_every_cluster_and_a_reason():
    state = snapshot([cluster("b", fabric("b-", leaves=1)), cluster("a", fabric("a-", leaves=1))],
                     [queue("q", quota=8)])
    answer = dry_run(state, job(gpus=8, pods=2))
    assert answer.placements == () and answer.preemptions == ()
    assert answer.waiting.message.startswith("queue q is at its quota of 8 GPUs")
    assert answer.clusters == (ClusterVerdict("a", None, ""), ClusterVerdict("b", None, ""))  # by name


def test_a_job_that_fits_has_each_clusters_score():
    state = snapshot([cluster("a", fabric("a-", leaves=1)), cluster("b", fabric("b-", leaves=1), state="Cordoned")],
                     [queue("q")])
    answer = dry_run(state, job(gpus=8))
    assert [p.cluster for p in answer.placements] == ["a"] and answer.waiting is None
    [a, b] = answer.clusters
    assert (a.cluster, a.score > 0, a.reason) == ("a", True, "")
    assert b == ClusterVerdict("b", None, "cordoned")


def _busy(state, name: str, gpus_by_position: dict[int, int]) -> None:
    state.clusters[name].apply({i: {GPU: g * 1000} for i, g in gpus_by_position.items()}, {}, [], +1)


def test_each_cluster_left_in_line_gets_its_estimated_score():
    """Score = (4 × TightestTier + 2 × BinPacking) / 7 (Locality weighs 1 and scores 0 here); a 8-GPU pod on a
    leaf of 64 GPUs with 16 free (a) or 64 free (b)."""
    state = snapshot([cluster("a", fabric("a-", leaves=1)), cluster("b", fabric("b-", leaves=1))], [queue("q")])
    _busy(state, "a", {i: 8 for i in range(6)})
    answer = dry_run(state, job(gpus=8))
    assert [(p.cluster, p.hypernode) for p in answer.placements] == [("a", "a-leaf-0")]
    assert answer.clusters == (ClusterVerdict("a", 82.143), ClusterVerdict("b", 60.714))  # 575/7, 425/7


def test_a_cluster_whose_gang_binds_worse_than_estimated_goes_back_in_line():
    """On a, leaf-0 holds 16 free GPUs by its totals but one node with 8 free: the estimate (leaf-0, 537.5/7)
    beats b's idle leaf (450/7), yet the gang binds only across the spine (356.25/7), so b takes it."""
    state = snapshot([cluster("a", fabric("a-", leaves=2)), cluster("b", fabric("b-", leaves=1))], [queue("q")])
    _busy(state, "a", {**{i: 4 for i in range(1, 8)}, **{i: 8 for i in range(9, 16)}})
    answer = dry_run(state, job(gpus=8, pods=2))
    assert [(p.cluster, p.hypernode, p.tier) for p in answer.placements] == [("b", "b-leaf-0", 1)]
    assert answer.clusters == (ClusterVerdict("a", 50.893), ClusterVerdict("b", 64.286))


def test_a_cluster_whose_free_gpus_are_in_pieces_too_small_for_a_pod_says_so_and_the_next_takes_it():
    state = snapshot([cluster("a", fabric("a-", leaves=1)), cluster("b", fabric("b-", leaves=1))], [queue("q")])
    _busy(state, "a", {i: 4 for i in range(8)})  # 32 GPUs free on a, 4 a node; its estimate beats b's
    answer = dry_run(state, job(gpus=8, pods=2))
    assert [p.cluster for p in answer.placements] == ["b"]
    assert answer.clusters == (
        ClusterVerdict("a", None, "free capacity is fragmented: its nodes cannot hold 2 pods of 8 GPUs"),
        ClusterVerdict("b", 64.286))


def test_a_hard_gang_whose_gpus_fit_a_leaf_but_not_its_cpus_is_told_what_cannot_be_held():
    state = snapshot([cluster("eu", fabric(leaves=2))], [queue("q")])
    answer = dry_run(state, job(gpus=8, pods=8, cpu=65, annotations=hard(1)))  # 520 CPUs; a leaf has 512
    assert answer.clusters == (ClusterVerdict(
        "eu", None, "needs 64 GPUs in one tier-1 HyperNode; those with enough free cannot hold 8 pods of 8 GPUs "
                    "and 65 CPUs on their nodes"),)


def test_a_placement_keeps_its_score_to_six_places_where_the_dry_run_shows_three():
    state = snapshot([cluster("a", fabric("a-", leaves=1)), cluster("b", fabric("b-", leaves=1))], [queue("q")])
    _busy(state, "a", {i: 8 for i in range(6)})
    [placement] = schedule(state, [job(gpus=8)]).placements
    assert placement.score == 82.142857  # 575/7


def test_a_split_job_placed_in_parts_has_the_score_of_each_cluster_a_part_goes_to():
    """16 GPUs free on each cluster, two parts of 16: the whole fits neither, each part fits one. (A cluster's
    verdict is that of the last part looked at there: y's on b.)"""
    state = snapshot([cluster("a", fabric("a-", leaves=1, nodes_per_leaf=2)),
                      cluster("b", fabric("b-", leaves=1, nodes_per_leaf=2))], [queue("q")])
    pair = job(parts=(("x", 1, 2, 8), ("y", 1, 2, 8)), annotations={"archipelago.io/placement": "split"})
    answer = dry_run(state, pair)
    assert sorted((p.part, p.cluster) for p in answer.placements) == [("x", "a"), ("y", "b")]
    b = answer.clusters[1]
    assert (b.cluster, b.score is not None, b.reason) == ("b", True, "")
