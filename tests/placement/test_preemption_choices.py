"""Which running jobs a job preempts, and where (broker/engine/placement/cycle/ `_preempt`, `_candidates`,
`_victims_for`): named cases, each a small federation, the pending jobs, and the victims they take (or none)."""

from __future__ import annotations

from dataclasses import replace

from broker.engine.placement import Config, Queue, Tenant, schedule

from .fixtures import GPU, cluster, fabric, hard, job, queue, running, snapshot


def two_nodes(name: str = "eu"):
    """A cluster of one leaf of two 8-GPU nodes."""
    return cluster(name, fabric(f"{name}-", leaves=1, nodes_per_leaf=2))


def test_with_preemption_switched_off_no_queue_policy_preempts():
    eu = two_nodes()
    work = [running(f"low-{n.name}", "eu", [n.name]) for n in eu.nodes]
    s = snapshot([eu], [queue("q", preemption="LowerPriority")], running=work)
    result = schedule(s, [job("q", gpus=8, priority=5)], Config(preemption=False))
    assert result.placements == () and result.preemptions == ()


def test_each_urgent_job_of_a_cycle_preempts_a_victim_of_its_own_and_says_why():
    """The first urgent job takes the most recently started; the second, the other (not the one already gone)."""
    eu = two_nodes()
    a, b = eu.nodes
    work = [running("late", "eu", [a.name], started_at=5.0), running("early", "eu", [b.name], started_at=1.0)]
    s = snapshot([eu], [queue("q", preemption="LowerPriority")], running=work)
    first, second = job("q", gpus=8, priority=5, job_id="first"), job("q", gpus=8, priority=5, job_id="second")
    result = schedule(s, [first, second])
    assert sorted(p.job_id for p in result.placements) == ["first", "second"]
    assert [(p.job_id, p.preemptor, p.rule) for p in result.preemptions] == [
        ("late", "first", "WithinQueue"), ("early", "second", "WithinQueue")]
    assert result.preemptions[0].message == (
        "preempted by higher-priority job first (priority 5 > 0) of the same queue q to make room on eu")


def test_clusters_the_job_may_not_use_or_without_victims_do_not_stop_the_search_for_one_with_victims():
    """a: its selector keeps the job off; b: full of another queue's work; c: full of its queue's low work."""
    clusters = [cluster("a", fabric("a-", leaves=1, nodes_per_leaf=1), labels={"region": "ap"}),
                cluster("b", fabric("b-", leaves=1, nodes_per_leaf=1), labels={"region": "eu"}),
                cluster("c", fabric("c-", leaves=1, nodes_per_leaf=1), labels={"region": "eu"})]
    work = [running("other", "b", ["b-leaf-0-n0"], queue_name="o"), running("low", "c", ["c-leaf-0-n0"])]
    s = snapshot(clusters, [queue("q", preemption="LowerPriority"), queue("o")], running=work)
    urgent = job("q", gpus=8, priority=5, annotations={"archipelago.io/cluster-selector": "region in (eu)"})
    result = schedule(s, [urgent])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(urgent.id, "c")]
    assert [p.job_id for p in result.preemptions] == ["low"]


def test_a_job_short_of_quota_first_preempts_work_where_that_makes_room():
    """Quota 16 GPUs, 24 used by three low jobs: two fill cluster a, one runs on b (full too). The job needs two
    victims to be back within its quota: both of a's, where that also makes room, not b's first."""
    a, b = two_nodes("a"), two_nodes("b")
    work = [running("low-a0", "a", ["a-leaf-0-n0"], started_at=1.0), running("low-a1", "a", ["a-leaf-0-n1"], started_at=2.0),
            running("low-b", "b", ["b-leaf-0-n0"], started_at=3.0), running("other-b", "b", ["b-leaf-0-n1"], queue_name="o")]
    s = snapshot([a, b], [queue("q", quota=16, preemption="LowerPriority"), queue("o", tenant="u")], running=work)
    urgent = job("q", gpus=8, priority=5)
    result = schedule(s, [urgent])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(urgent.id, "a")]
    assert sorted(p.job_id for p in result.preemptions) == ["low-a0", "low-a1"]


def test_victims_not_needed_are_spared_and_a_hard_bound_counts_where_room_is_made():
    """Two leaves of two nodes; the job needs 16 GPUs in one leaf. Victims are tried lowest priority first:
    p0 (leaf 1), p1 (leaf 0), p2 (leaf 1). Evicting p0 and p1 frees 16 GPUs, but not in one leaf; p2 completes
    leaf 1, and p1 turns out not to be needed."""
    eu = cluster("eu", fabric("eu-", leaves=2, nodes_per_leaf=2))
    work = [running("p0", "eu", ["eu-leaf-1-n0"], priority=0), running("p1", "eu", ["eu-leaf-0-n0"], priority=1),
            running("p2", "eu", ["eu-leaf-1-n1"], priority=2), running("p9", "eu", ["eu-leaf-0-n1"], priority=9)]
    s = snapshot([eu], [queue("q", preemption="LowerPriority")], running=work)
    urgent = job("q", gpus=8, pods=2, priority=5, annotations=hard(1))
    result = schedule(s, [urgent])
    assert [(p.job_id, p.hypernode) for p in result.placements] == [(urgent.id, "eu-leaf-1")]
    assert sorted(p.job_id for p in result.preemptions) == ["p0", "p2"]


def test_a_whole_job_placed_by_preemption_is_one_placement_scored_as_on_free_nodes():
    """Two ReplicatedJobs placed whole: one placement (part None), with the score the same placement gets when
    its nodes are free to begin with."""
    eu = two_nodes()
    pending = job("q", priority=5, parts=(("a", 1, 1, 8), ("b", 1, 1, 8)))
    free = schedule(snapshot([two_nodes()], [queue("q")]), [pending])
    work = [running(f"low-{n.name}", "eu", [n.name]) for n in eu.nodes]
    result = schedule(snapshot([eu], [queue("q", preemption="LowerPriority")], running=work), [pending])
    [placement] = result.placements
    assert placement.part is None and len(result.preemptions) == 2
    assert (placement.hypernode, placement.score) == (free.placements[0].hypernode, free.placements[0].score)


def test_preempting_exclusive_work_gives_its_domain_back():
    """An exclusive job (label leaf) of low priority runs on one of leaf 0's nodes; the urgent exclusive job needs
    a whole leaf and leaf 1 is full of another queue's work: it takes leaf 0 from the low job."""
    eu = cluster("eu", fabric("eu-", leaves=2, nodes_per_leaf=2))
    low = replace(running("low", "eu", ["eu-leaf-0-n0"]), exclusive_topology="leaf")
    work = [low] + [running(f"other-{i}", "eu", [f"eu-leaf-1-n{i}"], queue_name="o") for i in range(2)]
    s = snapshot([eu], [queue("q", preemption="LowerPriority"), queue("o")], running=work)
    urgent = job("q", priority=5, parts=(("workers", 1, 2, 8),), exclusive="leaf")
    result = schedule(s, [urgent])
    assert [(p.job_id, p.hypernode) for p in result.placements] == [(urgent.id, "eu-leaf-0")]
    assert [p.job_id for p in result.preemptions] == ["low"]


def test_reclaim_spares_work_of_a_queue_within_its_nominal_quota_of_what_the_job_asks():
    """Tenant t's queue 'lend' has 8 GPUs and no CPUs of nominal quota, and uses 8 GPUs: it borrows nothing the
    job asks (GPUs, CPUs), so the job of queue 'q' may not reclaim its work."""
    eu = cluster("eu", fabric("eu-", leaves=1, nodes_per_leaf=1))
    lend = Queue("lend", "t", 1.0, 0, {GPU: 8000, "cpu": 0}, None, "Never", "Never")
    s = snapshot([eu], [queue("q", quota=8, reclaim="Any"), lend], running=[running("lent", "eu", ["eu-leaf-0-n0"],
                                                                                   queue_name="lend")])
    result = schedule(s, [job("q", gpus=8, priority=5)])
    assert result.placements == () and result.preemptions == ()


def test_a_split_exclusive_job_placed_by_preemption_keeps_each_parts_domain():
    """Leaves of one node, both running low work; the split job's two parts (8 GPUs each, exclusive per leaf) fit
    only once both are preempted: each part gets its own leaf."""
    eu = cluster("eu", fabric("eu-", leaves=2, nodes_per_leaf=1))
    work = [running(f"low-{n.name}", "eu", [n.name]) for n in eu.nodes]
    s = snapshot([eu], [queue("q", preemption="LowerPriority")], running=work)
    pair = job("q", priority=5, parts=(("x", 1, 1, 8), ("y", 1, 1, 8)), exclusive="leaf",
               annotations={"archipelago.io/placement": "split"})
    result = schedule(s, [pair])
    assert sorted((p.part, p.exclusive_domains) for p in result.placements) == [
        ("x", (("leaf", "eu-leaf-0"),)), ("y", (("leaf", "eu-leaf-1"),))]


def test_work_of_a_queue_no_longer_configured_is_not_taken_for_fair_share():
    """The victim's queue (and so its tenant) is gone from the settings: the job waits, as no fair share says
    what that tenant may keep."""
    eu = two_nodes()
    work = [running(f"orphan-{n.name}", "eu", [n.name], queue_name="gone", tenant="old") for n in eu.nodes]
    s = snapshot([eu], [queue("l", tenant="late")], running=work, tenants=[Tenant("late", 1.0,
                                                                                  "LessThanOrEqualToFinalShare")])
    result = schedule(s, [job("l", gpus=8, tenant="late")])
    assert result.placements == () and result.preemptions == ()


def test_a_preemption_binds_past_a_hypernode_whose_free_gpus_are_too_scattered():
    """Leaf 0 has 16 GPUs free, 4 on each node: too scattered for two 8-GPU pods. Preempting the low job on leaf 1
    frees two whole nodes there, the same 16 GPUs: leaf 0 comes first in the search and is passed over."""
    eu = cluster("eu", fabric("eu-", leaves=2, nodes_per_leaf=4))
    work = ([running(f"half-{i}", "eu", [f"eu-leaf-0-n{i}"], gpus_per_node=4, queue_name="o") for i in range(4)]
            + [running("other", "eu", ["eu-leaf-1-n0", "eu-leaf-1-n1"], queue_name="o"),
               running("low", "eu", ["eu-leaf-1-n2", "eu-leaf-1-n3"])])
    s = snapshot([eu], [queue("q", preemption="LowerPriority"), queue("o")], running=work)
    urgent = job("q", gpus=8, pods=2, priority=5)
    result = schedule(s, [urgent])
    assert [(p.job_id, p.hypernode) for p in result.placements] == [(urgent.id, "eu-leaf-1")]
    assert [p.job_id for p in result.preemptions] == ["low"]
