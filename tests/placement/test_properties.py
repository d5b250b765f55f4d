"""Properties over random inventories and workloads (hypothesis)."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.engine.placement import Config, Node, PendingJob, schedule

from .fixtures import GPU, cluster, fabric, hard, job, node, queue, snapshot

PROPERTY = settings(max_examples=40, deadline=None)


@st.composite
def inventories(draw):
    clusters = []
    for c in range(draw(st.integers(1, 3))):
        leaves = draw(st.integers(1, 4))
        nodes, hypernodes = fabric(f"c{c}-", leaves=leaves, nodes_per_leaf=draw(st.integers(1, 4)),
                                   leaves_per_spine=draw(st.integers(1, 2)), gpus=draw(st.sampled_from([4, 8])),
                                   node_labels=lambda leaf, i: {"block": f"{leaf}-b{i // 2}"})
        nodes = tuple(_maybe_busy(draw, n) for n in nodes)
        state = draw(st.sampled_from(["Ready", "Ready", "Ready", "Cordoned"]))
        clusters.append(cluster(f"c{c}", (nodes, hypernodes), state=state))
    return clusters


def _maybe_busy(draw, n: Node) -> Node:
    busy = draw(st.sampled_from([0, 0, 0, 2, 4]))
    unschedulable = draw(st.sampled_from([False, False, False, False, True]))
    return node(n.name, gpus=n.allocatable[GPU] // 1000, labels=n.labels, used_gpus=busy, unschedulable=unschedulable)


@st.composite
def workloads(draw, queues=("a", "b")):
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        parts = tuple((f"p{k}", draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.sampled_from([0, 1, 4, 8])))
                      for k in range(draw(st.integers(1, 2))))
        annotations = draw(st.sampled_from([{}, hard(1), hard(2), {"archipelago.io/network-topology-mode": "soft"},
                                            {"archipelago.io/placement": "split"}]))
        exclusive = draw(st.sampled_from([None, None, None, "block"]))
        jobs.append(job(draw(st.sampled_from(queues)), parts=parts, annotations=annotations, exclusive=exclusive,
                        priority=draw(st.integers(0, 3)), submitted_at=float(i), job_id=f"j{i}"))
    return jobs


def queues():
    return [queue("a", weight=1, preemption="LowerPriority"), queue("b", weight=2, quota=48)]


def assigned_usage(jobs, placement):
    """A placement's usage per node rebuilt from its pods and their spec, not from what it reports."""
    pod_requests = {part.name: part.pod_requests for j in jobs if j.id == placement.job_id for part in j.spec.parts}
    usage = {}
    for a in placement.assignments:
        node = usage.setdefault(a.node, {})
        for r, q in pod_requests[a.replicated_job].items():
            node[r] = node.get(r, 0) + q * a.pods
    return usage


def check_no_overcommit(s, inventory, jobs, result, running=()):
    """Recompute every node's usage from the inputs and the decisions, independently of the indexes:
    running placements by the usage they came with, new ones from their pods' requests."""
    used = {}
    for c in inventory:
        for n in c.nodes:
            used[(c.name, n.name)] = dict(n.used)
    preempted = {(p.job_id, p.cluster) for p in result.preemptions}
    holds = [(p, p.node_usage) for p in running] + [(p, assigned_usage(jobs, p)) for p in result.placements]
    for p, node_usage in holds:
        if (p.job_id, p.cluster) in preempted:
            continue
        for name, usage in node_usage.items():
            for r, q in usage.items():
                used[(p.cluster, name)][r] = used[(p.cluster, name)].get(r, 0) + q
    for c in inventory:
        for n in c.nodes:
            for r, q in used[(c.name, n.name)].items():
                if r in n.allocatable or r != "pods":  # a node that states no pod limit has none
                    assert q <= n.allocatable.get(r, 0), f"{c.name}/{n.name} over-committed on {r}"
        index = s.clusters[c.name]
        for h in index.hypernodes.values():
            assert all(v >= 0 for v in h.free.values()), f"HyperNode {h.name} over-committed"
            for r in (GPU, "cpu"):  # cordoned and NotReady nodes are free nowhere
                assert h.free.get(r, 0) == sum(index.free[i].get(r, 0) for i in h.nodes if index.usable[i])


def check_gangs_whole(jobs, result):
    by_job = {}
    for p in result.placements:
        by_job.setdefault(p.job_id, []).append(p)
    for j in jobs:
        placements = by_job.get(j.id, [])
        assert (j.id in result.waiting) != bool(placements), "each job is placed or waits, never both"
        if not placements:
            continue
        if j.spec.placement == "whole":
            assert len(placements) == 1 and placements[0].part is None
        else:
            assert sorted(p.part for p in placements) == sorted(part.name for part in j.spec.parts)
        pods = {}
        for p in placements:
            for a in p.assignments:
                pods[a.replicated_job] = pods.get(a.replicated_job, 0) + a.pods
        assert pods == {part.name: part.pods for part in j.spec.parts}


def check_hard_bounds(s, jobs, result):
    spec_of = {j.id: j.spec for j in jobs}
    for p in result.placements:
        bound = spec_of[p.job_id].tier_bound
        if bound is None:
            continue
        assert p.tier is not None and p.tier <= bound
        members = {s.clusters[p.cluster].nodes[i].name for i in s.clusters[p.cluster].hypernodes[p.hypernode].nodes}
        assert {a.node for a in p.assignments} <= members
        assert set(p.node_usage) == {a.node for a in p.assignments}


def check_exclusive(jobs, result):
    spec_of = {j.id: j.spec for j in jobs}
    held = [(p.cluster, d) for p in result.placements for d in p.exclusive_domains]
    assert len(held) == len(set(held)), "an exclusive domain went to two child Jobs"
    for p in result.placements:
        wanted = sum(part.replicas for part in spec_of[p.job_id].parts
                     if part.exclusive_topology and (p.part is None or p.part == part.name))
        assert len(p.exclusive_domains) == wanted


@PROPERTY
@given(inventories(), workloads())
def test_decisions_never_overcommit_split_gangs_or_break_hard_bounds(inventory, jobs):
    s = snapshot(inventory, queues())
    result = schedule(s, jobs)
    check_no_overcommit(s, inventory, jobs, result)
    check_gangs_whole(jobs, result)
    check_hard_bounds(s, jobs, result)
    check_exclusive(jobs, result)


@PROPERTY
@given(inventories(), workloads(), workloads(), st.randoms())
def test_preemption_never_overcommits_and_stays_within_the_tenant(inventory, first, second, rnd):
    s = snapshot(inventory, queues())
    placed = schedule(s, first).placements
    spec = {j.id: j for j in first}
    # Running work of two tenants, at priorities on both sides of the urgent jobs': a victim must be of
    # the preemptor's tenant and of lower priority, whatever else would make room.
    # (a job's placements share its tenant, queue, priority and start, as the scheduler reads them)
    owner = {p.job_id: rnd.choice([("t", spec[p.job_id].queue), ("u", "c")]) for p in placed}
    priority = {job_id: rnd.randint(0, 10) for job_id in owner}
    started = {job_id: rnd.random() for job_id in owner}
    running = [p.as_running(tenant=owner[p.job_id][0], queue=owner[p.job_id][1], priority=priority[p.job_id],
                            started_at=started[p.job_id]) for p in placed]
    urgent = [PendingJob(f"u-{j.id}", "t", "a", j.priority + 5, j.submitted_at, j.spec) for j in second]
    s2 = snapshot(inventory, queues() + [queue("c", tenant="u", preemption="LowerPriority")], running=running)
    result = schedule(s2, urgent)
    check_no_overcommit(s2, inventory, urgent, result, running)
    check_gangs_whole(urgent, result)
    victim_of = {r.job_id: r for r in running}
    preemptor = {j.id: j for j in urgent}
    for victim in result.preemptions:
        assert victim_of[victim.job_id].tenant == preemptor[victim.preemptor].tenant
        assert victim_of[victim.job_id].priority < preemptor[victim.preemptor].priority


@PROPERTY
@given(inventories(), workloads(), st.randoms())
def test_same_input_same_output_whatever_the_order_given(inventory, jobs, rnd):
    first = schedule(snapshot(inventory, queues()), jobs)
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert schedule(snapshot(inventory, queues()), shuffled) == first


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(2, 6), st.integers(0, 10_000))
def test_a_job_that_fits_an_empty_cluster_is_never_starved(small_gpus, lifetime, seed):
    """Small jobs keep arriving from a queue with a lower share; the big job still gets its turn."""
    rnd = random.Random(seed)
    inventory = [cluster("eu", fabric(leaves=2, nodes_per_leaf=4))]
    big = job("big", pods=8, gpus=8, submitted_at=0.0, job_id="big")
    ends = {}  # job id -> cycle it finishes
    running = []
    config = Config(starvation_after_s=300)
    for cycle in range(60):
        now = 100.0 * cycle
        running = [r for r in running if ends[r.job_id] > cycle]
        stream = [job("small", pods=rnd.randint(1, 4), gpus=small_gpus, submitted_at=now, job_id=f"s{cycle}-{k}")
                  for k in range(6)]
        s = snapshot(inventory, [queue("big", weight=1), queue("small", weight=100)], running=running, now=now)
        result = schedule(s, [big] + stream, config)
        if any(p.job_id == "big" for p in result.placements):
            return
        for p in result.placements:
            ends[p.job_id] = cycle + lifetime
            running.append(p.as_running(tenant="t", queue="small", priority=0, started_at=now))
    raise AssertionError("the big job never ran")
