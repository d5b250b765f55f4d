"""Topology quality: against a first-fit baseline on a trace, and against an exact optimum (MILP)."""

import random

import pulp
import pytest

from broker.engine.placement import schedule
from broker.engine.placement.quality import first_fit, replay

from .fixtures import GPU, cluster, fabric, hard, job, queue, snapshot

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PuLP 3 announces its 4.0 API


def trace(seed, length=300):
    rnd = random.Random(seed)
    return [(job("q", pods=rnd.choice([1, 2, 2, 4, 4, 8, 12, 16]), gpus=rnd.choice([1, 2, 4, 8]),
                 job_id=f"t{seed}-{i}"), rnd.randint(3, 25)) for i in range(length)]


def replay_on_two_fabrics(events, place):
    """Online replay over two clusters of four leaves each: (could fit one leaf, did)."""
    s = snapshot([cluster("eu", fabric("eu-", leaves=4)), cluster("us", fabric("us-", leaves=4))], [queue("q")])
    return replay(s, events, place)


def engine(s, pending):
    return list(schedule(s, [pending]).placements)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_engine_keeps_gangs_in_one_leaf_far_more_often_than_first_fit(seed):
    eligible, in_one = replay_on_two_fabrics(trace(seed), engine)
    ff_eligible, ff_in_one = replay_on_two_fabrics(trace(seed), first_fit)
    share, baseline = in_one / eligible, ff_in_one / ff_eligible
    print(f"seed {seed}: engine {share:.1%} of {eligible}, first fit {baseline:.1%} of {ff_eligible}")
    assert eligible >= 50
    assert share >= 0.95
    assert share > baseline


def optimum_gpus_in_one_leaf(inventory, jobs):
    """Max GPUs of whole jobs placed each inside one tier-1 HyperNode, respecting every node's GPUs."""
    problem = pulp.LpProblem("one_leaf", pulp.LpMaximize)
    leaves = [(c, h) for c in inventory for h in c.hypernodes if h.tier == 1]
    capacity = {n.name: n.allocatable[GPU] // 1000 for c in inventory for n in c.nodes}
    y = {(j.id, h.name): pulp.LpVariable(f"y_{j.id}_{h.name}", cat="Binary") for j in jobs for _, h in leaves}
    x = {(j.id, n): pulp.LpVariable(f"x_{j.id}_{n}", 0, None, cat="Integer")
         for j in jobs for _, h in leaves for n in h.nodes}
    size = {j.id: (j.spec.parts[0].pods, j.spec.parts[0].pod_requests[GPU] // 1000) for j in jobs}
    problem += pulp.lpSum(y[j.id, h.name] * size[j.id][0] * size[j.id][1] for j in jobs for _, h in leaves)
    for j in jobs:
        problem += pulp.lpSum(y[j.id, h.name] for _, h in leaves) <= 1
        for _, h in leaves:
            problem += pulp.lpSum(x[j.id, n] for n in h.nodes) == size[j.id][0] * y[j.id, h.name]
    for n, gpus in capacity.items():
        problem += pulp.lpSum(x[j.id, n] * size[j.id][1] for j in jobs if (j.id, n) in x) <= gpus
    problem.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=20))
    assert pulp.LpStatus[problem.status] == "Optimal"
    return round(pulp.value(problem.objective))


@pytest.mark.parametrize("seed", range(4))
def test_engine_is_close_to_the_exact_optimum_on_small_instances(seed):
    rnd = random.Random(seed)
    inventory = [cluster("eu", fabric("eu-", leaves=3, nodes_per_leaf=3, leaves_per_spine=3))]
    jobs = [job("q", pods=rnd.randint(1, 6), gpus=rnd.choice([2, 4, 8]), annotations=hard(1), job_id=f"m{seed}x{i}")
            for i in range(10)]
    best = optimum_gpus_in_one_leaf(inventory, jobs)
    placed = schedule(snapshot(inventory, [queue("q")]), jobs).placements
    got = sum(u[GPU] for p in placed for u in p.node_usage.values()) // 1000
    print(f"seed {seed}: engine {got} GPUs, optimum {best}")
    assert got <= best
    assert got >= 0.75 * best
