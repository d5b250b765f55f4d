"""What a cycle keeps per cluster between decisions — the changing filters' reason, or the estimate's score, for a
request of one shape, while the cluster's version lasts (`_Cycle.estimates`), and the line of clusters they make
(`_Cycle.lines`) — changes no decision: the same cycle
keeping nothing decides alike (hypothesis), over workloads whose jobs repeat a few shapes, some placed before (the
Locality score), some avoiding a cluster, split ones (the Spread score reads the clusters their other parts use),
some owning exclusive domains; starving ones taking holds; and urgent ones preempting running work."""

from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.engine.placement import Config, HyperNode, schedule, shape_of
from broker.engine.placement.cycle import DEFAULT_SCORE_WEIGHTS
from broker.engine.placement.cycle import run as engine
from broker.engine.placement.snapshot import ClusterIndex

from .fixtures import cluster, fabric, hard, job, keeping_nothing, node, queue, snapshot
from .test_properties import inventories, queues

SPLIT = {"archipelago.io/placement": "split"}
SPREAD = Config(score_weights=MappingProxyType({**DEFAULT_SCORE_WEIGHTS, "Spread": 3.0}))


@st.composite
def repeated_shapes(draw, clusters=("c0", "c1", "c2")):
    shapes = [(tuple((f"p{k}", draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.sampled_from([1, 4, 8])))
                     for k in range(draw(st.integers(1, 2)))),
               draw(st.sampled_from([{}, hard(1), hard(2), SPLIT, {**SPLIT, **hard(1)}])),
               draw(st.sampled_from([None, None, "block"])))  # exclusive domains: `locks`
              for _ in range(draw(st.integers(1, 3)))]
    jobs = []
    for i in range(draw(st.integers(2, 16))):
        parts, annotations, exclusive = draw(st.sampled_from(shapes))
        pending = job(draw(st.sampled_from(["a", "b"])), parts=parts, annotations=annotations, exclusive=exclusive,
                      priority=draw(st.integers(0, 2)), submitted_at=float(i), job_id=f"j{i}")
        pending = replace(pending, shape=shape_of(pending.spec))
        kind = draw(st.sampled_from(["plain", "plain", "placed before", "avoiding"]))
        if kind == "placed before":
            pending = replace(pending, previous_clusters=(draw(st.sampled_from(clusters)),))
        elif kind == "avoiding":
            pending = replace(pending, avoided=MappingProxyType({draw(st.sampled_from(clusters)): "12:00"}))
        jobs.append(pending)
    return jobs


def reasons_in_order(result) -> dict[str, list[tuple[str, str]]]:
    """Each waiting job's reasons in their order (equal mappings compare equal in any order, but jobs share one
    mapping only when the order is the same too: `_Cycle._shared`)."""
    return {job_id: list(waiting.clusters.items()) for job_id, waiting in result.waiting.items()}


@pytest.mark.parametrize("config", [Config(), SPREAD], ids=["default weights", "with Spread"])
@settings(max_examples=60, deadline=None)
@given(inventory=inventories(), jobs=repeated_shapes(), starving=st.booleans())
def test_what_is_kept_per_cluster_changes_no_decision(config, inventory, jobs, starving):
    now = 1e9 if starving else 0.0  # every job waited past starvation_after: some take holds
    kept = schedule(snapshot(inventory, queues(), now=now), jobs, config)
    with keeping_nothing("estimates", "lines"):
        again = schedule(snapshot(inventory, queues(), now=now), jobs, config)
    assert kept == again
    assert reasons_in_order(kept) == reasons_in_order(again)


@settings(max_examples=40, deadline=None)
@given(inventory=inventories(), first=repeated_shapes(), second=repeated_shapes(), rnd=st.randoms())
def test_what_is_kept_per_cluster_changes_no_preemption(inventory, first, second, rnd):
    """Running work of lower priority in queue a, which preempts: trial evictions take capacity back and forth."""
    placed = schedule(snapshot(inventory, queues()), first).placements
    owner = {p.job_id: j.queue for j in first for p in placed if p.job_id == j.id}
    running = [p.as_running(tenant="t", queue=owner[p.job_id], priority=rnd.randint(0, 3),
                            started_at=rnd.random()) for p in placed]
    urgent = [replace(j, id=f"u-{j.id}", priority=j.priority + 2) for j in second]
    kept = schedule(snapshot(inventory, queues(), running=running), urgent)
    with keeping_nothing("estimates", "lines"):
        again = schedule(snapshot(inventory, queues(), running=running), urgent)
    assert kept == again
    assert reasons_in_order(kept) == reasons_in_order(again)


def test_the_next_job_of_a_shape_asks_again_only_of_the_cluster_that_changed(monkeypatch):
    """Three empty clusters; the first job lands on c0: the second, of its shape, is estimated on c0 alone."""
    asked = []
    estimate = engine._Cycle._estimate
    monkeypatch.setattr(engine._Cycle, "_estimate", lambda self, request, cluster, cap: (
        asked.append((request.job.id, cluster.name)), estimate(self, request, cluster, cap))[1])
    inventory = [cluster(name, fabric(f"{name}-", leaves=1, nodes_per_leaf=2)) for name in ("c0", "c1", "c2")]
    jobs = [replace(j, shape=shape_of(j.spec)) for j in (job("a", gpus=8, job_id=f"j{i}", submitted_at=float(i))
                                                         for i in range(2))]
    result = schedule(snapshot(inventory, queues()), jobs)
    assert [(p.job_id, p.cluster) for p in result.placements] == [("j0", "c0"), ("j1", "c0")]
    assert asked == [("j0", "c0"), ("j0", "c1"), ("j0", "c2"), ("j1", "c0")]


def test_a_split_jobs_later_part_is_scored_by_where_its_own_parts_went():
    """Spread alone: each job's p0 (two pods of 8 GPUs, one leaf) goes first, then its p1 (one pod) prefers the emptiest
    cluster its p0 is not on. j2's p0 lands on c2, and c0 is where its p1 goes; c0's score as j0's p1 saw it (with
    j0's p0 there, nothing has changed on c0 since) is not j2's to reuse."""
    inventory = [cluster("c0", fabric("c0-", leaves=2, nodes_per_leaf=2, leaves_per_spine=2)),
                 cluster("c1", fabric("c1-", leaves=3, nodes_per_leaf=1, leaves_per_spine=2)),
                 cluster("c2", fabric("c2-", leaves=3, nodes_per_leaf=2, leaves_per_spine=2))]
    spread = Config(score_weights=MappingProxyType({"TightestTier": 0.0, "BinPacking": 0.0, "Spread": 1.0,
                                                    "Locality": 0.0}))
    jobs = [job("a", parts=(("p0", 1, 2, 8), ("p1", 1, 1, 8)), annotations={**SPLIT, **hard(1)},
                submitted_at=float(i), job_id=f"j{i}") for i in range(3)]
    jobs = [replace(j, shape=shape_of(j.spec)) for j in jobs]
    result = schedule(snapshot(inventory, [queue("a")]), jobs, spread)
    assert [(p.job_id, p.part, p.cluster) for p in result.placements] == [
        ("j0", "p0", "c0"), ("j0", "p1", "c1"), ("j1", "p0", "c2"), ("j1", "p1", "c1"), ("j2", "p0", "c2"),
        ("j2", "p1", "c0")]


def test_a_cluster_whose_nodes_could_not_hold_the_gang_is_not_bound_again_while_it_is_unchanged(monkeypatch):
    """c0 has 8 GPUs free on its leaf, 4 on each of two nodes: its estimate (on HyperNode totals) puts a pod of 8
    GPUs there, first in line (the fuller cluster), and binding finds no node for it. The next job of that shape
    binds on c1 only: c0 is out of its line while c0 is as it was."""
    bound = []
    search = ClusterIndex.search
    monkeypatch.setattr(ClusterIndex, "search", lambda self, parts, demand, tier, cap, bind: (
        bind and bound.append(self.name), search(self, parts, demand, tier, cap, bind=bind))[1])
    fragmented = ((node("c0-n0", used_gpus=4, labels={"leaf": "c0-leaf"}),
                   node("c0-n1", used_gpus=4, labels={"leaf": "c0-leaf"})),
                  (HyperNode("c0-leaf", 1, None, (), ("c0-n0", "c0-n1")),))
    inventory = [cluster("c0", fragmented), cluster("c1", fabric("c1-", leaves=1, nodes_per_leaf=2))]
    jobs = [replace(j, shape=shape_of(j.spec)) for j in (job("a", gpus=8, job_id=f"j{i}", submitted_at=float(i))
                                                         for i in range(2))]
    result = schedule(snapshot(inventory, queues()), jobs)
    assert [(p.job_id, p.cluster) for p in result.placements] == [("j0", "c1"), ("j1", "c1")]
    assert bound == ["c0", "c1", "c1"]


def test_a_failed_bind_takes_the_cluster_out_of_every_line_of_the_shape(monkeypatch):
    """c1 has one node of 8 free GPUs, c0 12 free on three nodes, 4 on each (its estimate fits, its nodes cannot
    hold a pod of 8). j0 takes c1, the tighter fit; j1, avoiding c1, has a line of its own and finds c0's nodes
    cannot hold it; j2, of j0's kind, does not bind on c0 again: its line, made before, is told."""
    bound = []
    search = ClusterIndex.search
    monkeypatch.setattr(ClusterIndex, "search", lambda self, parts, demand, tier, cap, bind: (
        bind and bound.append(self.name), search(self, parts, demand, tier, cap, bind=bind))[1])
    fragmented = (tuple(node(f"c0-n{i}", used_gpus=4, labels={"leaf": "c0-leaf"}) for i in range(3)),
                  (HyperNode("c0-leaf", 1, None, (), ("c0-n0", "c0-n1", "c0-n2")),))
    inventory = [cluster("c0", fragmented), cluster("c1", fabric("c1-", leaves=1, nodes_per_leaf=1))]
    j0, j1, j2 = [replace(j, shape=shape_of(j.spec)) for j in (job("a", gpus=8, job_id=f"j{i}", submitted_at=float(i))
                                                               for i in range(3))]
    j1 = replace(j1, avoided=MappingProxyType({"c1": "12:00"}))
    result = schedule(snapshot(inventory, queues()), [j0, j1, j2])
    assert [(p.job_id, p.cluster) for p in result.placements] == [("j0", "c1")]
    assert bound == ["c1", "c0"]
