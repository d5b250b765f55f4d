"""Kueue's cohort quota semantics within a tenant: nominal quota is a guarantee, borrowed capacity goes
back (reclaimWithinCohort), and a queue at its quota makes room among its own work (withinClusterQueue)."""

import pytest

from broker.engine.placement import schedule

from .fixtures import cluster, fabric, gpus_by_queue, job, n_jobs, queue, running, snapshot


def q1_borrowing_all_of_q2(reclaim: str, q1_priority: int = 0):
    """64 GPUs; q1 (nominal 32) runs eight 8-GPU jobs, 32 of them borrowed from idle q2 (nominal 32)."""
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    borrowed = [running(f"q1-{i}", "eu", [n.name], priority=q1_priority, started_at=float(i), queue_name="q1")
                for i, n in enumerate(eu.nodes)]
    return snapshot([eu], [queue("q1", quota=32), queue("q2", quota=32, reclaim=reclaim)], running=borrowed)


def test_reclaim_returns_q2s_32_within_one_cycle():
    s = q1_borrowing_all_of_q2("Any")
    wanted = n_jobs("q2", 4, gpus=8)
    result = schedule(s, wanted)
    assert gpus_by_queue(result.placements, wanted) == {"q2": 32}
    # the newest borrowed work goes first; q1 keeps its own nominal 32
    assert sorted(p.job_id for p in result.preemptions) == ["q1-4", "q1-5", "q1-6", "q1-7"]
    assert {p.rule for p in result.preemptions} == {"ReclaimWithinCohort"}
    assert "reclaim within the cohort" in result.preemptions[0].message
    assert s.queues["q1"].usage["nvidia.com/gpu"] == 32_000 == s.queues["q2"].usage["nvidia.com/gpu"]


def test_reclaim_takes_no_more_than_the_nominal_quota():
    s = q1_borrowing_all_of_q2("Any")
    wanted = n_jobs("q2", 6, gpus=8)
    result = schedule(s, wanted)
    assert gpus_by_queue(result.placements, wanted) == {"q2": 32} and len(result.preemptions) == 4
    assert all("tenant t's other queues have 0 GPUs to lend" in result.waiting[j.id].message
               for j in wanted if j.id not in {p.job_id for p in result.placements})


@pytest.mark.parametrize("reclaim,q1_priority,reclaims", [
    ("Never", 0, False), ("LowerPriority", 0, False), ("LowerPriority", -1, True), ("Any", 5, True)])
def test_reclaim_follows_the_queues_policy(reclaim, q1_priority, reclaims):
    result = schedule(q1_borrowing_all_of_q2(reclaim, q1_priority), [job("q2", gpus=8)])
    assert bool(result.placements) == reclaims == bool(result.preemptions)


def test_a_job_that_would_borrow_reclaims_nothing():
    # q2 already uses its nominal 32: a 33rd GPU would be borrowed, and borrowing never preempts
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    work = [running(f"q1-{i}", "eu", [names[i]], queue_name="q1") for i in range(4)] + \
        [running(f"q2-{i}", "eu", [names[4 + i]], queue_name="q2") for i in range(4)]
    s = snapshot([eu], [queue("q1", quota=16), queue("q2", quota=32, reclaim="Any"), queue("idle", quota=16)],
                 running=work)
    result = schedule(s, [job("q2", gpus=8)])
    assert not result.placements and not result.preemptions


def test_a_queue_at_quota_preempts_its_own_low_priority_job_for_a_high_one():
    # q is at its nominal 16 with two low-priority jobs; the cluster has room, the quota has none
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    low = [running(f"low-{i}", "eu", [names[i]], priority=0, started_at=float(i)) for i in range(2)]
    high = job("q", gpus=8, priority=5)
    result = schedule(snapshot([eu], [queue("q", quota=16, preemption="LowerPriority")], running=low), [high])
    assert [p.job_id for p in result.placements] == [high.id]
    [victim] = result.preemptions
    assert (victim.job_id, victim.rule) == ("low-1", "WithinQueue")  # the most recently started
    assert f"preempted by higher-priority job {high.id} (priority 5 > 0) of the same queue q" in victim.message

    never = schedule(snapshot([eu], [queue("q", quota=16)], running=low), [high])
    assert not never.placements and never.waiting[high.id].message.startswith("queue q is at its quota of 16 GPUs")


def test_reclaim_takes_from_each_borrower_only_what_it_borrowed():
    # q1 and q3 (nominal 24 each) run 32 each, 8 borrowed apiece from idle q2 (nominal 16); q1's work is newest
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    names = [n.name for n in eu.nodes]
    work = [running(f"q3-{i}", "eu", [names[i]], started_at=float(i), queue_name="q3") for i in range(4)] + \
        [running(f"q1-{i}", "eu", [names[4 + i]], started_at=float(10 + i), queue_name="q1") for i in range(4)]
    s = snapshot([eu], [queue("q1", quota=24), queue("q2", quota=16, reclaim="Any"), queue("q3", quota=24)],
                 running=work)
    result = schedule(s, [job("q2", gpus=8, pods=2)])
    assert sorted(p.job_id for p in result.preemptions) == ["q1-3", "q3-3"]
    assert s.queues["q1"].usage["nvidia.com/gpu"] == 24_000 == s.queues["q3"].usage["nvidia.com/gpu"]


def test_split_jobs_preempt_and_are_preempted_as_one_gang():
    # a low-priority split job runs one part on each of two clusters; a high-priority split job needs a cluster
    eu, us = cluster("eu", fabric(leaves=1, nodes_per_leaf=2)), cluster("us", fabric(leaves=1, nodes_per_leaf=2))
    split = {"archipelago.io/placement": "split"}
    low = job("q", parts=(("a", 1, 2, 8), ("b", 1, 2, 8)), annotations=split, priority=0)
    s = snapshot([eu, us], [queue("q", preemption="LowerPriority")])
    placed = schedule(s, [low]).placements
    assert sorted(p.cluster for p in placed) == ["eu", "us"]  # 16 GPUs each: one part per cluster
    running_low = [p.as_running(tenant="t", queue="q", priority=0, started_at=0.0) for p in placed]
    s = snapshot([eu, us], [queue("q", preemption="LowerPriority")], running=running_low)
    high = job("q", parts=(("x", 1, 1, 8), ("y", 1, 1, 8)), annotations=split, priority=5)
    result = schedule(s, [high])
    assert sorted((p.job_id, p.part) for p in result.preemptions) == [(low.id, "a"), (low.id, "b")]  # all parts
    assert sorted(p.part for p in result.placements) == ["x", "y"]  # every part, in the same cycle
    assert len({p.cluster for p in result.placements}) == 1


def test_a_queue_at_quota_gives_back_quota_held_on_another_cluster():
    # q's quota is all used on us (full); eu is empty: the victim on us gives back quota, the job runs on eu
    eu, us = cluster("eu", fabric(leaves=1, nodes_per_leaf=2)), cluster("us", fabric(leaves=1, nodes_per_leaf=2))
    low = [running(f"low-{i}", "us", [n.name], priority=0, started_at=float(i)) for i, n in enumerate(us.nodes)]
    high = job("q", gpus=8, priority=5)
    result = schedule(snapshot([eu, us], [queue("q", quota=16, preemption="LowerPriority")], running=low), [high])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(high.id, "eu")]
    assert [(p.job_id, p.cluster) for p in result.preemptions] == [("low-1", "us")]


def test_what_a_queue_lent_it_cannot_use_until_it_is_given_back():
    # q1 borrows 4 of q2's 8 GPUs (on a cluster with room to spare): q2 may not take its whole nominal 8 too,
    # or the tenant would hold more than its queues' quotas together
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    borrower = running("borrower", "eu", [n.name for n in eu.nodes[:3]], gpus_per_node=4, queue_name="q1")
    s = snapshot([eu], [queue("q1", quota=8), queue("q2", quota=8)], running=[borrower])
    own = job("q2", gpus=8)
    result = schedule(s, [own])
    assert not result.placements
    assert result.waiting[own.id].message == ("tenant t's other queues borrowed 4 GPUs of queue q2's quota of "
                                              "8 GPUs; this job needs 8 GPUs and waits for it to be given back")
    assert s.tenant_usage["t"]["nvidia.com/gpu"] == 12_000



SPLIT = {"archipelago.io/placement": "split"}


@pytest.mark.parametrize("parts, annotations, headline, cause", [
    # two pods of 8 GPUs: the nodes have 4 free each: no cluster could take it, quota or not
    ((("workers", 1, 2, 8),), None, "no cluster can take it now, and queue q is at its quota of 16 GPUs", "capacity"),
    # two of 4 GPUs: eu takes them; only the quota holds it
    ((("workers", 1, 2, 4),), None, "queue q is at its quota of 16 GPUs", "quota"),
    # split: not whole (three pods of 4), but each part alone: only the quota
    ((("a", 1, 1, 4), ("b", 1, 2, 4)), SPLIT, "queue q is at its quota of 16 GPUs", "quota"),
    # split: part b fits nowhere, whatever the quota
    ((("a", 1, 1, 4), ("b", 1, 1, 8)), SPLIT,
     "no cluster can take it now (ReplicatedJob b), and queue q is at its quota of 16 GPUs", "capacity (ReplicatedJob b)"),
], ids=["whole, no room", "whole, room", "split, each part has room", "split, a part has none"])
def test_a_job_its_quota_holds_back_says_first_when_no_cluster_could_take_it(parts, annotations, headline, cause):
    """q (16 GPUs) uses 12, 4 on each node: eu's two and us's one keep 4 GPUs free each. The headline is what would
    still hold the job back with quota (its queue's usage rises and falls around its quota; no room stays no room)."""
    eu, us = cluster("eu", fabric("eu-", leaves=1, nodes_per_leaf=2)), cluster("us", fabric("us-", leaves=1,
                                                                                          nodes_per_leaf=1))
    used = [running(f"r-{n.name}", c.name, [n.name], gpus_per_node=4) for c in (eu, us) for n in c.nodes]
    pending = job("q", parts=parts, annotations=annotations)
    waiting = schedule(snapshot([eu, us], [queue("q", quota=16)], running=used), [pending]).waiting[pending.id]
    assert waiting.message.startswith(headline) and waiting.cause == cause
    assert bool(waiting.clusters) == (cause != "quota")
