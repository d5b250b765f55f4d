"""Which changes concern a parked job, case by case (the two cycles and their helpers are test_parked_jobs.py's): those
that do not leave it parked, and reported so; room or quota back where it may fit, the nodes held in its cycle freed,
a preemption that gives quota back, or clusters to avoid decide it again."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from broker.engine.placement import Parked, RunningPlacement, Tenant, schedule, shape_of
from tests.placement.fixtures import GPU, hard, job, queue
from tests.placement.test_parked_jobs import (A_NODES, B_NODES, decided, federation, parked_then, running_job, shaped,
                                              unshaped)


# Changes that do not concern a parked job: its turn passes, it is not decided again, and it is reported parked.
def _no_concern_cases():
    low0 = {"priority": 0}
    return {
        # its own tenant's work ends on a, where 24 GPUs still do not fit; its queue has no quota to give back
        "room_back_still_too_little": (
            job("plain", gpus=8, pods=3, tenant="t1", submitted_at=1.0),
            [running_job("x1", "plain", "a", A_NODES[:1]), running_job("x2", "plain", "a", A_NODES[1:]),
             running_job("full", "preempts", "b", B_NODES)], ["x1"]),
        # a job placed whole: 16 GPUs back on a hold one of its two ReplicatedJobs, not both
        "room_back_for_a_part_of_a_whole_job": (
            job("plain", tenant="t1", parts=(("x", 1, 2, 8), ("y", 1, 2, 8)), submitted_at=1.0),
            [running_job("first", "plain", "a", A_NODES[:2]), running_job("second", "plain", "a", A_NODES[2:]),
             running_job("third", "preempts", "b", B_NODES)], ["first"]),
        # 16 GPUs back on a, 8 in each leaf: not in one tier-1 HyperNode
        "room_back_across_leaves_for_a_hard_bound": (
            job("plain", gpus=8, pods=2, tenant="t1", submitted_at=1.0, annotations=hard(1)),
            [running_job("e0", "plain", "a", ["a-leaf-0-n0"]), running_job("e1", "plain", "a", ["a-leaf-1-n0"]),
             running_job("k0", "preempts", "a", ["a-leaf-0-n1"]), running_job("k1", "preempts", "a", ["a-leaf-1-n1"]),
             running_job("full", "preempts", "b", B_NODES)], ["e0", "e1"]),
        # its queue preempts nothing: lower-priority work of its queue on a would make room, if it could take it
        "its_queue_may_not_preempt": (
            job("plain", gpus=8, pods=2, tenant="t1", priority=2, submitted_at=1.0),
            [running_job("low", "plain", "a", A_NODES[:2], **low0), running_job("x", "preempts", "a", A_NODES[2:3]),
             running_job("gone", "preempts", "a", A_NODES[3:]), running_job("full", "preempts", "b", B_NODES)],
            ["gone"]),
        # its queue preempts lower priorities; the work that would make room is of its own priority
        "only_work_of_its_own_priority_would_make_room": (
            job("preempts", gpus=8, pods=2, tenant="t2", priority=0, submitted_at=1.0),
            [running_job("peer", "preempts", "a", A_NODES[:2], **low0), running_job("x", "plain", "a", A_NODES[2:3]),
             running_job("gone", "plain", "a", A_NODES[3:]), running_job("full", "plain", "b", B_NODES)], ["gone"]),
        # 24 GPUs asked; with its lower-priority work on a gone, 16 would be free
        "room_back_too_little_even_preempting": (
            job("preempts", gpus=8, pods=3, tenant="t2", priority=2, submitted_at=1.0),
            [running_job("low", "preempts", "a", A_NODES[:1], **low0), running_job("x", "plain", "a", A_NODES[1:3]),
             running_job("gone", "plain", "a", A_NODES[3:]), running_job("full", "plain", "b", B_NODES)], ["gone"]),
        # preempting its lower-priority work on a would free 16 GPUs, 8 in each leaf: not in one tier-1 HyperNode
        "preempting_makes_room_across_leaves_for_a_hard_bound": (
            job("preempts", gpus=8, pods=2, tenant="t2", priority=2, submitted_at=1.0, annotations=hard(1)),
            [running_job("low", "preempts", "a", ["a-leaf-0-n0"], **low0),
             running_job("k", "plain", "a", ["a-leaf-0-n1"]), running_job("gone", "plain", "a", ["a-leaf-1-n0"]),
             running_job("k2", "plain", "a", ["a-leaf-1-n1"]), running_job("full", "plain", "b", B_NODES)], ["gone"]),
        # no cluster's selector lets it in: room back on a is no reason
        "the_cluster_with_room_back_is_not_one_it_may_use": (
            job("preempts", gpus=8, tenant="t2", priority=2, submitted_at=1.0,
                annotations={"archipelago.io/cluster-selector": "region in (nowhere)"}),
            [running_job("low", "preempts", "a", A_NODES[:1], **low0), running_job("x", "plain", "a", A_NODES[1:3]),
             running_job("gone", "plain", "a", A_NODES[3:]), running_job("full", "plain", "b", B_NODES)], ["gone"]),
    }


@pytest.mark.parametrize("case", sorted(_no_concern_cases()))
def test_a_change_that_does_not_concern_a_parked_job_leaves_it_parked(case):
    pending, before, ended = _no_concern_cases()[case]
    result = parked_then([pending], before, ended)
    assert result.order == () and result.placements == ()
    assert result.inadmissible == {pending.id}


def test_parked_jobs_without_a_shape_are_each_checked_against_the_room_that_came_back():
    """Without shapes, no answer is shared: a 40-GPU job (it fits nowhere) is checked first, then an 8-GPU job of
    the same queue, priority and tenant, which fits the 8 GPUs back on a."""
    big = job("plain", gpus=8, pods=5, tenant="t1", submitted_at=1.0)
    small = job("plain", gpus=8, tenant="t1", submitted_at=2.0)
    result = parked_then([big, small], [running_job("gone", "plain", "a", A_NODES[:1]),
                                         running_job("x", "preempts", "a", A_NODES[1:]),
                                         running_job("full", "preempts", "b", B_NODES)], ["gone"])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(small.id, "a")]
    assert result.order == (small.id,)


def test_parked_jobs_without_a_shape_are_each_checked_for_what_preempting_would_free():
    """As above in a LowerPriority queue: the 40-GPU job would not fit even with its queue's low work gone; the
    24-GPU job would, once another queue's 8 GPUs end on a."""
    big = job("preempts", gpus=8, pods=5, tenant="t2", priority=2, submitted_at=1.0)
    small = job("preempts", gpus=8, pods=3, tenant="t2", priority=2, submitted_at=2.0)
    result = parked_then([big, small], [running_job("low", "preempts", "a", ["a-leaf-0-n0", "a-leaf-1-n0"]),
                                        running_job("x", "plain", "a", ["a-leaf-0-n1"]),
                                        running_job("gone", "plain", "a", ["a-leaf-1-n1"]),
                                        running_job("full", "plain", "b", B_NODES)], ["gone"])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(small.id, "a")]
    assert [p.job_id for p in result.preemptions] == ["low"]


def test_a_parked_job_with_clusters_to_avoid_is_decided_again_though_one_of_its_kind_stays_parked():
    """Time may lift an avoidance: a job that avoids a cluster is decided again every cycle, even when a job of
    its shape, queue, priority and tenant stays parked."""
    full = [running_job("fa", "plain", "a", A_NODES), running_job("fb", "plain", "b", B_NODES)]
    kind = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=1.0)
    avoiding = replace(shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=2.0), avoided={"a": "12:00"})
    result = schedule(federation(full), [kind, avoiding], parked=Parked(frozenset({kind.id, avoiding.id})))
    assert result.order == (avoiding.id,) and result.inadmissible == {kind.id}


def test_jobs_of_one_shape_wait_each_for_its_own_reasons():
    """Three jobs of one shape that fit nowhere: the first's reasons are the third's (decided once), but the second
    avoids a, and says so."""
    full = [running_job("fa", "plain", "a", A_NODES), running_job("fb", "plain", "b", B_NODES)]
    first, third = (shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=t) for t in (1.0, 3.0))
    second = replace(shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=2.0), avoided={"a": "12:00"})
    result = schedule(federation(full), [first, second, third])
    assert sorted(result.waiting) == sorted([first.id, second.id, third.id])
    assert result.waiting[third.id] == replace(result.waiting[first.id], job_id=third.id)
    assert result.waiting[second.id].clusters["a"] == (
        "its pods did not all become ready here within the startup timeout; avoided until 12:00")


def test_a_job_that_may_wait_for_a_change_of_its_lot_is_not_reported_parked():
    """A job avoiding a cluster (time lifts that), and one whose tenant may preempt other tenants' work for its fair
    share (what others hold changes), wait without being parked; a plain job of the same size is parked."""
    full = [running_job("fa", "plain", "a", A_NODES), running_job("fb", "plain", "b", B_NODES)]
    plain = job("plain", gpus=8, tenant="t1", submitted_at=1.0)
    avoiding = replace(job("plain", gpus=8, tenant="t1", submitted_at=2.0), avoided={"a": "12:00"})
    assert schedule(federation(full), [plain, avoiding]).inadmissible == {plain.id}
    fair = (Tenant("t1", 1.0, "LessThanOrEqualToFinalShare"), Tenant("t2"))
    result = schedule(federation(full, tenants=fair), [job("plain", gpus=8, pods=5, tenant="t1", submitted_at=1.0)])
    assert result.waiting and result.inadmissible == frozenset()


# Nodes held at the end of the parked jobs' cycle (`Parked.held`) give capacity back when no hold keeps them now.
LATE = 2000.0  # the first job below has waited past starvation_after_s (900 s), the parked job has not
KEPT = [running_job("k0", "plain", "a", ["a-leaf-0-n0"]), running_job("k1", "plain", "a", ["a-leaf-1-n0"])]


def test_a_parked_job_stays_parked_while_the_nodes_held_in_its_cycle_are_held_again():
    """The starving job (16 GPUs in one leaf) holds leaf 0 of a in both cycles; the parked job (8 GPUs) did not fit
    beside it. Nodes held again are no change: it stays parked, though a's last node has room now that x ended
    unreported (`Parked` names no cluster), as a cycle that decides only for the changes it is told of does."""
    starving = job("plain", gpus=8, pods=2, tenant="t1", submitted_at=0.0, annotations=hard(1))
    parked = job("plain", gpus=8, tenant="t1", submitted_at=1500.0)
    running = KEPT + [running_job("full", "preempts", "b", B_NODES)]
    first = schedule(federation(running + [running_job("x", "plain", "a", ["a-leaf-1-n1"])], LATE), [starving, parked])
    assert [h.nodes for h in first.holds.values()] == [("a-leaf-0-n0", "a-leaf-0-n1")]
    assert first.inadmissible == {parked.id}
    result = schedule(federation(running, LATE), [starving, parked],
                      parked=Parked(first.inadmissible, held={"a": frozenset(("a-leaf-0-n0", "a-leaf-0-n1"))}))
    assert [h.nodes for h in result.holds.values()] == [("a-leaf-0-n0", "a-leaf-0-n1")]
    assert result.order == (starving.id,) and result.placements == () and result.inadmissible == {parked.id}


def test_nodes_held_in_its_cycle_and_free_now_decide_a_parked_job_again_while_another_job_holds_nodes():
    """b's free node was held in the parked job's cycle; now a starving job holds leaf 0 of a, and the parked job
    (8 GPUs) is decided again: it fits."""
    starving = job("plain", gpus=8, pods=2, tenant="t1", submitted_at=0.0, annotations=hard(1))
    parked = job("plain", gpus=8, tenant="t1", submitted_at=1500.0)
    running = KEPT + [running_job("full", "preempts", "b", B_NODES[:3])]
    result = schedule(federation(running, LATE), [starving, parked],
                      parked=Parked(frozenset({parked.id}), held={"b": frozenset(B_NODES[3:])}))
    assert [h.hypernode for h in result.holds.values()] == ["a-leaf-0"]
    assert [p.job_id for p in result.placements] == [parked.id]


def test_room_back_too_scattered_for_its_pods_decides_a_parked_job_again_and_it_says_why():
    """16 GPUs come back on a, 4 on each node: enough by HyperNode totals, so the parked job (two pods of 8) is
    decided again, and waits with the reason as it is now, not as it was."""
    halves = [RunningPlacement(f"{k}{i}", None, "a", None, {n: {GPU: 4000}}, {n: 1}, "t1", "plain", 0, 0.0)
              for i, n in enumerate(A_NODES) for k in ("kept", "ends")]
    pair = job("plain", gpus=8, pods=2, tenant="t1", submitted_at=1.0)
    result = parked_then([pair], halves + [running_job("full", "preempts", "b", B_NODES)],
                         [f"ends{i}" for i in range(4)])
    assert result.order == (pair.id,) and result.placements == ()
    assert result.waiting[pair.id].clusters["a"] == "free capacity is fragmented: its nodes cannot hold 2 pods of 8 GPUs"


def test_room_preempting_would_make_too_scattered_for_its_pods_still_decides_a_parked_job_again():
    """As above in a LowerPriority queue: 8 GPUs come back on a, and its queue's low work holds 8 more, 4 on each of
    two nodes: with that work gone the totals would do, so it is decided again (and waits: the pods do not bind)."""
    kept = [RunningPlacement(f"kept{i}", None, "a", None, {n: {GPU: 4000}}, {n: 1}, "t1", "plain", 0, 0.0)
            for i, n in enumerate(A_NODES)]
    low = RunningPlacement("low", None, "a", None, {n: {GPU: 4000} for n in A_NODES[::2]}, {n: 1 for n in A_NODES[::2]},
                           "t2", "preempts", 0, 0.0)
    ends = RunningPlacement("ends", None, "a", None, {n: {GPU: 4000} for n in A_NODES[1::2]},
                            {n: 1 for n in A_NODES[1::2]}, "t1", "plain", 0, 0.0)
    urgent = job("preempts", gpus=8, pods=2, tenant="t2", priority=2, submitted_at=1.0)
    result = parked_then([urgent], kept + [low, ends, running_job("full", "plain", "b", B_NODES)], ["ends"])
    assert result.order == (urgent.id,) and result.placements == () and result.preemptions == ()
    assert result.waiting[urgent.id].clusters["a"] == "needs 16 GPUs; 8 GPUs free"


def test_a_preemption_gives_quota_back_to_the_victims_tenant_and_its_parked_jobs_are_decided_again():
    """The quota queue (16 GPUs) runs low work of 8; its urgent job preempts it. The parked job of that queue (40
    GPUs: more than its quota) fits no cluster the preemption freed, but its tenant's quota came back: it is
    decided again in the same cycle (and waits, for its quota)."""
    running = [running_job("low", "quota", "a", A_NODES[:1]), running_job("rest", "plain", "a", A_NODES[1:]),
               running_job("full", "preempts", "b", B_NODES)]
    big = job("quota", gpus=8, pods=5, tenant="t1", submitted_at=1.0)
    first = schedule(federation(running), [big])
    assert first.inadmissible == {big.id}
    urgent = job("quota", gpus=8, tenant="t1", priority=2, submitted_at=2.0)
    result = schedule(federation(running), [urgent, big], parked=Parked(first.inadmissible))
    assert [p.job_id for p in result.preemptions] == ["low"]
    assert result.order == (urgent.id, big.id) and big.id in result.waiting


def test_a_kind_is_answered_again_after_a_decision_between_two_of_its_jobs_changes_something():
    """Two parked jobs of one kind (40 GPUs: more than the quota queue's 16) either side of an urgent job that
    preempts the queue's low work: the first is passed over, the second decided again, for its tenant's quota came
    back in between (it waits, for its quota)."""
    running = [running_job("low", "quota", "a", A_NODES[:1]), running_job("rest", "plain", "a", A_NODES[1:]),
               running_job("full", "preempts", "b", B_NODES)]
    early, late = (shaped(queue_name="quota", gpus=8, pods=5, tenant="t1", priority=2, submitted_at=at)
                   for at in (1.0, 3.0))
    first = schedule(federation(running), [early, late])
    assert first.inadmissible == {early.id, late.id}
    urgent = job("quota", gpus=8, tenant="t1", priority=2, submitted_at=2.0)
    result = schedule(federation(running), [early, urgent, late], parked=Parked(first.inadmissible))
    assert [p.job_id for p in result.preemptions] == ["low"]
    assert result.order == (urgent.id, late.id) and late.id in result.waiting


def test_each_parked_job_of_a_lone_queue_is_answered_for_its_own_kind():
    """One queue, no other to take turns with: a parked job too big for any cluster, then a small one; room comes
    back on a. The big one is passed over, the small one decided again, and placed there."""
    big = shaped(queue_name="plain", gpus=8, pods=20, tenant="t1", submitted_at=1.0)
    small = shaped(queue_name="plain", gpus=8, tenant="t1", submitted_at=2.0)
    running = [running_job("ends", "plain", "a", A_NODES), running_job("stays", "plain", "b", B_NODES)]
    result = parked_then([big, small], running, ["ends"])
    assert result.order == (small.id,) and [(p.job_id, p.cluster) for p in result.placements] == [(small.id, "a")]


def test_room_back_is_looked_for_past_a_hypernode_short_of_cpus():
    """8 GPUs come back on leaf 0 of a, whose nodes have 2 CPUs free each; the parked job's pod asks 8 GPUs and 40
    CPUs. Leaf 0 is passed over; the spine's totals would hold it, so it is decided again (and waits)."""
    hog = RunningPlacement("hog", None, "a", None, {n: {"cpu": 62000} for n in A_NODES[:2]}, {n: 1 for n in A_NODES[:2]},
                           "t1", "plain", 0, 0.0)
    gpus = [running_job(f"g{i}", "plain", "a", [n]) for i, n in enumerate(A_NODES)]
    pending = job("plain", gpus=8, tenant="t1", submitted_at=1.0, cpu=40)
    result = parked_then([pending], [hog, *gpus, running_job("full", "preempts", "b", B_NODES)], ["g0"])
    assert result.order == (pending.id,) and result.placements == ()


def test_room_preempting_would_make_is_looked_for_past_a_hypernode_short_of_cpus():
    """As above in a LowerPriority queue: a CPU job ends on leaf 1 of a; preempting the job's low work on leaf 0
    would free 8 GPUs on a node with 2 CPUs free. Leaf 0 is passed over, the spine's totals would hold it."""
    hog = RunningPlacement("hog", None, "a", None, {n: {"cpu": 62000} for n in A_NODES[:2]}, {n: 1 for n in A_NODES[:2]},
                           "t1", "plain", 0, 0.0)
    ends = RunningPlacement("ends", None, "a", None, {A_NODES[3]: {"cpu": 8000}}, {A_NODES[3]: 1}, "t1", "plain", 0, 0.0)
    gpus = [running_job("low", "preempts", "a", A_NODES[:1])] + [running_job(f"g{i}", "plain", "a", [n])
                                                                 for i, n in enumerate(A_NODES[1:])]
    pending = job("preempts", gpus=8, tenant="t2", priority=2, submitted_at=1.0, cpu=40)
    result = parked_then([pending], [hog, ends, *gpus, running_job("full", "plain", "b", B_NODES)], ["ends"])
    assert result.order == (pending.id,) and result.placements == () and result.preemptions == ()


MANY_TENANTS = [queue("a1", tenant="a"), queue("a2", tenant="a", preemption="LowerPriority"),
                queue("b1", tenant="b", weight=2.0), queue("c1", tenant="c", preemption="LowerPriority")]


@pytest.mark.parametrize("seed", range(30))
def test_jobs_of_one_shape_take_their_turns_as_jobs_without_shapes_do(seed):
    """A shared standing is kept per tenant until its queues hold more (a placement) or less (a preemption): the
    turns of a cycle over shaped jobs of several tenants, some preempting others' running work, are those of the
    same cycle with every standing computed again for every job."""
    rnd = random.Random(seed)
    tenant_of = {q.name: q.tenant for q in MANY_TENANTS}
    running = [running_job(f"r{i}", name, node[0], [node], tenant=tenant_of[name])  # tenant a over its share
               for i, (node, name) in enumerate(zip(A_NODES + B_NODES, rnd.choices(["a1", "a2", "a2", "c1"], k=8)))]
    pending = []
    for i in range(24):
        name = rnd.choice(MANY_TENANTS).name
        arrival = job(name, gpus=rnd.choice([4, 8]), pods=rnd.choice([1, 2]), tenant=tenant_of[name],
                      priority=rnd.choice([0, 0, 1]), submitted_at=float(i))
        pending.append(replace(arrival, shape=shape_of(arrival.spec)))
    tenants = (Tenant("a"), Tenant("b", 2.0), Tenant("c", fair_share_preemption="LessThanOrEqualToFinalShare"))
    shaped_cycle = schedule(federation(running, queues=MANY_TENANTS, tenants=tenants), pending)
    reference = schedule(federation(running, queues=MANY_TENANTS, tenants=tenants), unshaped(pending))
    assert shaped_cycle.order == reference.order
    assert decided(shaped_cycle) == decided(reference)
