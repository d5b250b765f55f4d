"""The first-fit baseline the quality figures compare the engine with (broker/engine/placement/quality.py): the
first Ready cluster with the JobSet CRD whose nodes, taken in order, hold the whole job; topology ignored."""

from __future__ import annotations

from broker.engine.placement.quality import first_fit, placed_in_one_hypernode
from tests.placement.fixtures import GPU, GiB, cluster, fabric, job, node, queue, snapshot

TAINT = {"key": "maintenance", "effect": "NoSchedule"}


def _layout(prefix: str, count: int, taint_first: bool = False):
    return tuple(node(f"{prefix}-n{i}", taints=(TAINT,) if taint_first and i == 0 else ()) for i in range(count)), ()


def _where(placements) -> list[tuple[str, str, str, int]]:
    return [(p.cluster, a.node, a.replicated_job, a.pods) for p in placements for a in p.assignments]


def test_the_first_cluster_whose_nodes_in_order_hold_the_whole_job_takes_it():
    state = snapshot([cluster("a-down", _layout("down", 8), state="NotReady"),  # clusters go by name
                      cluster("b-nocrd", _layout("nocrd", 8), jobset_crd=False),
                      cluster("c-small", _layout("small", 3, taint_first=True)),
                      cluster("d-big", fabric("big-"))], [queue("q")])
    three = job(gpus=8, pods=3)  # small has only two untainted nodes
    assert _where(first_fit(state, three)) == [("d-big", f"big-leaf-0-n{i}", "workers", 1) for i in range(3)]

    halves = job(gpus=4, pods=3, cpu=2)
    [placed] = first_fit(state, halves)
    assert _where([placed]) == [("c-small", "small-n1", "workers", 2), ("c-small", "small-n2", "workers", 1)]
    assert (placed.job_id, placed.part, placed.hypernode, placed.tier) == (halves.id, None, None, None)
    assert {n: (u[GPU], u["cpu"], u["memory"]) for n, u in placed.node_usage.items()} == {
        "small-n1": (8000, 4000, 2 * GiB), "small-n2": (4000, 2000, GiB)}

    # what it placed is taken, and so is what a job's earlier parts take: small-n2's other half holds a but
    # then nothing holds b there, so both go to big, b on the node after a's
    parts = job(parts=(("a", 1, 1, 4), ("b", 1, 1, 8)))
    assert _where(first_fit(state, parts)) == [("d-big", "big-leaf-0-n3", "a", 1), ("d-big", "big-leaf-0-n4", "b", 1)]
    assert _where(first_fit(state, job(gpus=4, pods=1))) == [("c-small", "small-n2", "workers", 1)]


def test_a_job_no_cluster_holds_is_not_placed_and_takes_nothing():
    state = snapshot([cluster("small", _layout("small", 2))], [queue("q")])
    assert first_fit(state, job(gpus=8, pods=3)) == []
    assert _where(first_fit(state, job(gpus=8, pods=2))) == [("small", "small-n0", "workers", 1),
                                                            ("small", "small-n1", "workers", 1)]


def test_first_fit_ignores_topology_where_the_engine_would_not():
    state = snapshot([cluster("eu", fabric("eu-", leaves=2, nodes_per_leaf=2))], [queue("q")])
    first_fit(state, job(gpus=8, pods=1))  # eu-leaf-0-n0 taken
    spread = first_fit(state, job(gpus=8, pods=2))
    assert _where(spread) == [("eu", "eu-leaf-0-n1", "workers", 1), ("eu", "eu-leaf-1-n0", "workers", 1)]
    assert not placed_in_one_hypernode(state, spread, tier=1)
    assert placed_in_one_hypernode(state, spread, tier=2)
    assert not placed_in_one_hypernode(state, [], tier=3)


def test_a_node_that_takes_pods_of_two_parts_counts_them_both():
    state = snapshot([cluster("eu", _layout("eu", 1)), cluster("us", _layout("us", 1))], [queue("q")])
    [both] = first_fit(state, job(parts=(("a", 1, 1, 4), ("b", 1, 1, 4))))
    assert _where([both]) == [("eu", "eu-n0", "a", 1), ("eu", "eu-n0", "b", 1)]
    assert both.node_usage["eu-n0"][GPU] == 8000
    [elsewhere] = first_fit(state, job(gpus=1, pods=1))
    assert elsewhere.cluster == "us"
    assert not placed_in_one_hypernode(state, [both, elsewhere], tier=3), "two clusters are never one HyperNode"
