"""Parked jobs (found inadmissible by one cycle) are decided again only when a change concerns them, and the
cycle that skips the others decides exactly as one that decides every job (`schedule(..., parked=...)`).

Each case is two cycles over a small federation: the first finds which jobs do not fit; between the two,
running jobs end (capacity and quota come back: `Parked.clusters`, `Parked.tenants`) and new work is placed
(no reason to decide anyone again, though a `LowerPriority` queue's higher-priority jobs may preempt it); the
second cycle runs twice on equal snapshots, once skipping parked jobs and once deciding them all (and without
the answers shared by jobs of one shape). Then one named case per reason to decide a parked job again.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from broker.placement import Config, Parked, PendingJob, RunningPlacement, Snapshot, Tenant, schedule, shape_of
from tests.placement.fixtures import GPU, cluster, fabric, hard, job, queue

QUEUES = [queue("plain", tenant="t1"),  # no quota, preempts nothing
          queue("quota", tenant="t1", quota=16, preemption="LowerPriority"),  # quota given back by its tenant
          queue("preempts", tenant="t2", preemption="LowerPriority")]
TENANT_OF = {q.name: q.tenant for q in QUEUES}
NOW = 60.0  # nobody has waited past starvation_after_s
STARVING = Config(max_holds=2)  # at 2,000 s everyone has: the two oldest that do not fit (of tenants not above
# their fair share) hold nodes, the others wait as if they had not waited long


def federation(running: list[RunningPlacement], now: float = NOW, queues=QUEUES,
               tenants=(Tenant("t1"), Tenant("t2"))) -> Snapshot:
    clusters = [cluster("a", fabric("a-", leaves=2, nodes_per_leaf=2)), cluster("b", fabric("b-", leaves=1,
                                                                                            nodes_per_leaf=4))]
    return Snapshot(clusters, queues, tenants, running, now)


def arrivals(rnd: random.Random, count: int, start: float) -> list[PendingJob]:
    jobs = []
    for i in range(count):
        name = rnd.choice(QUEUES).name
        split = rnd.random() < 0.25
        parts = (("workers", 1, rnd.choice([1, 2]), rnd.choice([4, 8])), ("eval", 1, 1, rnd.choice([2, 4])))
        arrival = job(name, gpus=rnd.choice([2, 4, 8]), pods=rnd.choice([1, 2, 4]), tenant=TENANT_OF[name],
                      priority=rnd.choice([0, 1, 2]), submitted_at=start + i, parts=parts if split else None,
                      annotations={"archipelago.io/placement": "split"} if split else None)
        jobs.append(replace(arrival, shape=shape_of(arrival.spec)))  # as the scheduler reads them: shapes shared
    return jobs


def as_running(result, jobs: dict[str, PendingJob], started_at: float) -> list[RunningPlacement]:
    return [RunningPlacement(p.job_id, p.part, p.cluster, p.hypernode, p.node_usage, p.node_pods,
                             jobs[p.job_id].tenant, jobs[p.job_id].queue, jobs[p.job_id].priority, started_at)
            for p in result.placements]


def decided(result) -> tuple:
    return (sorted((p.job_id, p.part or "", p.cluster, p.assignments) for p in result.placements),
            sorted((p.job_id, p.part or "", p.preemptor) for p in result.preemptions),
            sorted((h.job_id, h.cluster, h.nodes) for h in result.holds.values()))


def second_cycle(seed: int):
    """(the cycle skipping parked jobs, the cycle deciding every job, the parked jobs) of one random case;
    in odd cases every job has waited past starvation_after_s."""
    rnd = random.Random(seed)
    now, config = (2000.0, STARVING) if seed % 2 else (NOW, Config())
    pending = arrivals(rnd, 14, 0.0)
    jobs = {j.id: j for j in pending}
    first = schedule(federation([], now), pending, config)
    running = as_running(first, jobs, 1.0)
    ended = rnd.sample(sorted({r.job_id for r in running}), k=min(len(running), rnd.choice([0, 1, 1, 2])))
    running = [r for r in running if r.job_id not in ended]
    gone = [r for r in as_running(first, jobs, 1.0) if r.job_id in ended]
    admitted = {p.job_id for p in first.placements}
    waiting = [j for j in pending if j.id not in admitted]
    foreign = arrivals(rnd, rnd.choice([0, 2, 4]), 20.0)  # placed meanwhile
    jobs.update((j.id, j) for j in foreign)
    placed_elsewhere = as_running(schedule(federation(running, now), foreign, config), jobs, 30.0)
    running += placed_elsewhere
    later = arrivals(rnd, rnd.choice([0, 3]), 40.0)
    held: dict[str, frozenset[str]] = {}
    for hold in first.holds.values():
        held[hold.cluster] = held.get(hold.cluster, frozenset()) | frozenset(hold.nodes)
    parked = Parked(first.inadmissible, frozenset(r.cluster for r in gone), frozenset(r.tenant for r in gone), held)
    return (schedule(federation(running, now), waiting + later, config, parked),
            schedule(federation(running, now), unshaped(waiting + later), config), first.inadmissible)


def unshaped(jobs: list[PendingJob]) -> list[PendingJob]:
    """Without shapes, a cycle decides every job from scratch: the reference for the answers it shares per shape."""
    return [replace(j, shape=None) for j in jobs]


@pytest.mark.parametrize("seed", range(60))
def test_a_cycle_skipping_parked_jobs_decides_as_one_deciding_them_all(seed):
    incremental, full, parked = second_cycle(seed)
    assert decided(incremental) == decided(full)
    skipped = set(full.order) - set(incremental.order)
    assert skipped <= parked
    assert list(incremental.order) == [j for j in full.order if j not in skipped]  # in the same turns
    assert all(incremental.waiting[j] == full.waiting[j] for j in incremental.waiting)


def test_the_cases_skip_parked_jobs_and_decide_some_again():
    """The cases above are worth something only if they skip jobs, and decide parked jobs again for each reason."""
    skipped = again = 0
    for seed in range(60):
        incremental, full, parked = second_cycle(seed)
        skipped += len(set(full.order) - set(incremental.order))
        again += len(parked & set(incremental.order))
    assert skipped >= 60 and again >= 20


def running_job(job_id: str, queue_name: str, cluster_name: str, nodes: list[str], priority: int = 0,
                tenant: str | None = None):
    """A job running on whole 8-GPU nodes."""
    return RunningPlacement(job_id, None, cluster_name, None, {n: {GPU: 8000} for n in nodes}, {n: 1 for n in nodes},
                            tenant or TENANT_OF[queue_name], queue_name, priority, 0.0)


A_NODES, B_NODES = [f"a-leaf-{l}-n{i}" for l in range(2) for i in range(2)], [f"b-leaf-0-n{i}" for i in range(4)]


def parked_then(pending: list[PendingJob], before: list[RunningPlacement], ended: list[str]):
    """The first cycle parks `pending`'s jobs; then the `ended` jobs end. (The second cycle's result, what it parked.)"""
    first = schedule(federation(before), pending)
    assert first.placements == () and first.inadmissible == {j.id for j in pending}
    after = [r for r in before if r.job_id not in ended]
    gone = [r for r in before if r.job_id in ended]
    return schedule(federation(after), pending, parked=Parked(first.inadmissible, frozenset(r.cluster for r in gone),
                                                              frozenset(r.tenant for r in gone)))


def test_quota_given_back_by_a_job_on_another_cluster_decides_again_a_job_its_quota_held():
    """Quota 16 GPUs: 8 in use on a leave no room for 16 more, though b has room; the 8 end on a (still too small)."""
    small = running_job("small", "quota", "a", A_NODES[:1])
    others = running_job("others", "plain", "a", A_NODES[1:])
    big = job("quota", gpus=8, pods=2, tenant="t1", submitted_at=1.0)
    result = parked_then([big], [small, others, running_job("half", "plain", "b", B_NODES[:2])], ["small"])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(big.id, "b")]


def test_capacity_back_where_lower_priority_work_of_its_queue_runs_decides_again_a_job_that_may_preempt_it():
    """24 GPUs asked; a holds 16 of its queue's lower-priority work and 16 of another queue's: too little even
    with that work preempted, until the other queue's 16 end there."""
    low = running_job("low", "preempts", "a", A_NODES[:2], priority=0)
    others = running_job("others", "plain", "a", A_NODES[2:])
    urgent = job("preempts", gpus=8, pods=3, tenant="t2", priority=2, submitted_at=1.0)
    result = parked_then([urgent], [low, others, running_job("full", "plain", "b", B_NODES)], ["others"])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(urgent.id, "a")]
    assert [p.job_id for p in result.preemptions] == ["low"]


def test_room_back_for_one_part_decides_again_a_split_job_whose_whole_does_not_fit_there():
    """Two parts of 16 GPUs: b has room for one; 16 end on a, room for the other, not for both."""
    pair = job("plain", tenant="t1", parts=(("x", 1, 2, 8), ("y", 1, 2, 8)), submitted_at=1.0,
               annotations={"archipelago.io/placement": "split"})
    result = parked_then([pair], [running_job("first", "plain", "a", A_NODES[:2]),
                                  running_job("second", "plain", "a", A_NODES[2:]),
                                  running_job("third", "preempts", "b", B_NODES[:2])], ["first"])
    assert sorted(p.cluster for p in result.placements) == ["a", "b"]


# Jobs of one shape get one answer per cluster until a decision changes something (`PendingJob.shape`). Tenant
# weights set the order their queues' jobs are decided in: first's, then middle's, then last's.
ORDERED = [queue("first", tenant="heavy"), queue("middle", tenant="one", preemption="LowerPriority"),
           queue("last", tenant="light", preemption="LowerPriority")]
ORDERED_TENANTS = (Tenant("heavy", 100.0), Tenant("one"), Tenant("light", 0.01))


def shaped(**kwargs) -> PendingJob:
    pending = job(**kwargs)
    return replace(pending, shape=shape_of(pending.spec))


def cycles_in_order(pending: list[PendingJob], before: list[RunningPlacement], after: list[RunningPlacement],
                    arrivals: list[PendingJob]):
    """The first cycle parks `pending`; a's inventory changes (no room back) and `before` becomes `after`; then the
    second cycle, skipping parked jobs, and the same deciding them all."""
    first = schedule(federation(before, queues=ORDERED, tenants=ORDERED_TENANTS), pending)
    assert first.placements == () and first.inadmissible == {j.id for j in pending}
    parked = Parked(first.inadmissible, frozenset({"a"}), frozenset())
    return [schedule(federation(after, queues=ORDERED, tenants=ORDERED_TENANTS), jobs, parked=p)
            for jobs, p in ((pending + arrivals, parked), (unshaped(pending + arrivals), Parked()))]


def test_a_shape_is_answered_again_after_a_preemption_gives_room_back():
    """Two parked jobs of 8 GPUs, of one shape, either side of a new job that preempts 16 GPUs on a for its 8: the
    first finds no room there, the second finds the 8 the preemption left."""
    low = running_job("low", "middle", "a", A_NODES[:2], tenant="one")
    rest = [running_job("rest", "first", "a", A_NODES[2:], tenant="heavy"),
            running_job("full", "first", "b", B_NODES, tenant="heavy")]
    early = shaped(queue_name="first", tenant="heavy", gpus=8, submitted_at=1.0)
    late = shaped(queue_name="last", tenant="light", gpus=8, submitted_at=2.0)
    urgent = job("middle", tenant="one", gpus=8, priority=2, submitted_at=3.0)
    incremental, full = cycles_in_order([early, late], [low, *rest], [low, *rest], [urgent])
    assert [(p.job_id, p.cluster) for p in full.placements] == [(urgent.id, "a"), (late.id, "a")]
    assert decided(incremental) == decided(full)


def test_a_shape_is_answered_per_queue_and_priority_where_preempting_would_make_room():
    """Two parked jobs of 24 GPUs, of one shape: on a, with 16 GPUs free, the first's queue has nothing it may
    preempt, the second's has 16 GPUs of lower priority."""
    low = running_job("low", "last", "a", A_NODES[:2], tenant="light")
    ended = running_job("ended", "first", "a", A_NODES[2:], tenant="heavy")
    full_b = running_job("full", "first", "b", B_NODES, tenant="heavy")
    first_in_line = shaped(queue_name="middle", tenant="one", gpus=8, pods=3, priority=2, submitted_at=1.0)
    second = shaped(queue_name="last", tenant="light", gpus=8, pods=3, priority=2, submitted_at=2.0)
    incremental, full = cycles_in_order([first_in_line, second], [low, ended, full_b], [low, full_b], [])
    assert [(p.job_id, p.cluster) for p in full.placements] == [(second.id, "a")]
    assert decided(incremental) == decided(full)


def test_a_parked_job_keeps_its_turn_in_its_queue():
    """A parked job of 64 GPUs heads plain's queue, a job of 8 behind it; preempts' job of 8 goes between them: its
    tenant holds less after admission than the parked job's would, more than the job behind it. One node is free:
    it goes to preempts' job, whether the parked job is decided again or its turn just passes."""
    hog = running_job("hog", "preempts", "a", A_NODES[:2])
    rest = [running_job("mine", "plain", "a", A_NODES[2:3]), running_job("full", "preempts", "b", B_NODES)]
    parked = shaped(queue_name="plain", tenant="t1", gpus=8, pods=8, submitted_at=1.0)
    behind = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=2.0)
    between = shaped(queue_name="preempts", tenant="t2", gpus=8, submitted_at=3.0)
    before = schedule(federation([hog, *rest]), [parked])
    assert before.inadmissible == {parked.id}
    for result in (schedule(federation([hog, *rest]), [parked, behind, between], parked=Parked(before.inadmissible)),
                   schedule(federation([hog, *rest]), [parked, behind, between])):
        assert [(p.job_id, p.cluster) for p in result.placements] == [(between.id, "a")]
    alone = schedule(federation([hog, *rest]), [behind, between])
    assert [p.job_id for p in alone.placements] == [behind.id], "without the parked job ahead, behind goes first"


def test_a_parked_job_past_its_queues_head_keeps_its_turn_too():
    """As above, with a parked job of 8 GPUs that no selector lets in ahead of the parked job of 64 in plain's queue:
    its turn comes before preempts' job, the next parked job's after it, so preempts' job is placed before the job
    behind them — when the two parked jobs' turns pass in one walk through plain's queue as when both are decided."""
    hog = running_job("hog", "preempts", "a", A_NODES[:2])
    rest = [running_job("mine", "plain", "a", A_NODES[2:3]), running_job("full", "preempts", "b", B_NODES)]
    first = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=0.5,
                   annotations={"archipelago.io/cluster-selector": "region in (nowhere)"})
    parked = shaped(queue_name="plain", tenant="t1", gpus=8, pods=8, submitted_at=1.0)
    behind = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=2.0)
    between = shaped(queue_name="preempts", tenant="t2", gpus=8, submitted_at=3.0)
    before = schedule(federation([hog, *rest]), [first, parked])
    assert before.inadmissible == {first.id, parked.id}
    for result in (schedule(federation([hog, *rest]), [first, parked, behind, between],
                            parked=Parked(before.inadmissible)),
                   schedule(federation([hog, *rest]), [first, parked, behind, between])):
        assert [(p.job_id, p.cluster) for p in result.placements] == [(between.id, "a")]


def test_a_long_waiting_parked_job_past_its_queues_head_keeps_its_turn_by_its_age():
    """Everyone has waited past starvation_after_s, and no job may hold nodes: the oldest go first. Plain's queue
    holds two parked jobs of 64 GPUs of priority 2, submitted at 1 and 3, then a job of 8 of priority 0 submitted
    at 1.5; preempts' job of 8 was submitted at 2. One node is free: preempts' job goes before the second parked
    job, hence before the job behind it, and takes the node — when the parked jobs' turns pass in one walk through
    plain's queue as when both are decided."""
    running = [running_job("m1", "plain", "a", A_NODES[:2]), running_job("m2", "plain", "b", B_NODES[:1]),
               running_job("t1", "preempts", "a", A_NODES[2:3]), running_job("t2", "preempts", "b", B_NODES[1:])]
    config = Config(max_holds=0)
    older = shaped(queue_name="plain", tenant="t1", gpus=8, pods=8, priority=2, submitted_at=1.0)
    parked = shaped(queue_name="plain", tenant="t1", gpus=8, pods=8, priority=2, submitted_at=3.0)
    behind = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=1.5)
    between = shaped(queue_name="preempts", tenant="t2", gpus=8, submitted_at=2.0)
    before = schedule(federation(running, now=2000.0), [older, parked], config)
    assert before.inadmissible == {older.id, parked.id}
    for result in (schedule(federation(running, now=2000.0), [older, parked, behind, between], config,
                            parked=Parked(before.inadmissible)),
                   schedule(federation(running, now=2000.0), [older, parked, behind, between], config)):
        assert [(p.job_id, p.cluster) for p in result.placements] == [(between.id, "a")]


def test_the_job_behind_a_parked_job_waits_for_its_own_turn():
    """Three jobs of 8 GPUs, their tenants and queues holding alike, in submission order: a parked job no cluster's
    selector lets in, then preempts' job, then the job behind the parked one in plain's queue. Two nodes are free,
    one on each cluster: preempts' job is placed first, though the parked job's turn passed before its own."""
    running = [running_job("m1", "plain", "a", A_NODES[:2]), running_job("m2", "plain", "b", B_NODES[:1]),
               running_job("t1", "preempts", "a", A_NODES[2:3]), running_job("t2", "preempts", "b", B_NODES[1:3])]
    parked = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=1.0,
                    annotations={"archipelago.io/cluster-selector": "region in (nowhere)"})
    between = shaped(queue_name="preempts", tenant="t2", gpus=8, submitted_at=2.0)
    behind = shaped(queue_name="plain", tenant="t1", gpus=8, submitted_at=3.0)
    before = schedule(federation(running), [parked])
    assert before.inadmissible == {parked.id}
    incremental, full = (schedule(federation(running), [parked, behind, between], parked=p)
                         for p in (Parked(before.inadmissible), Parked()))
    assert [p.job_id for p in full.placements] == [between.id, behind.id]
    assert decided(incremental) == decided(full) and incremental.placements == full.placements
    assert set(full.order) - set(incremental.order) == {parked.id}


def test_jobs_of_one_shape_share_their_standing_but_not_their_priority():
    """Two jobs of one shape in plain's queue, of priority 2 and 0, that no selector lets in; preempts' job of
    priority 1, its tenant and queue holding as much: the priority decides their order (criterion 5), so it is
    decided between the two, though nothing changed between their turns."""
    running = [running_job("m1", "plain", "a", A_NODES[:2]), running_job("m2", "plain", "b", B_NODES[:1]),
               running_job("t1", "preempts", "a", A_NODES[2:3]), running_job("t2", "preempts", "b", B_NODES[1:3])]
    nowhere = {"archipelago.io/cluster-selector": "region in (nowhere)"}
    high = shaped(queue_name="plain", tenant="t1", gpus=8, priority=2, submitted_at=1.0, annotations=nowhere)
    low = shaped(queue_name="plain", tenant="t1", gpus=8, priority=0, submitted_at=2.0, annotations=nowhere)
    between = shaped(queue_name="preempts", tenant="t2", gpus=8, priority=1, submitted_at=3.0)
    result = schedule(federation(running), [high, low, between])
    assert result.order == (high.id, between.id, low.id)


def test_jobs_of_one_shape_are_parked_per_priority_where_preempting_would_make_room():
    """Two parked jobs of 32 GPUs in the quota queue (16 GPUs of quota: neither ever fits), of priority 2 and 0; 16
    of another tenant's GPUs end on a, where the queue runs 16 of priority 1. With that work preempted the first
    would fit a's totals, so it is decided again (and waits for quota); the second may preempt nothing there."""
    low = running_job("low", "quota", "a", A_NODES[:2], priority=1)
    gone = running_job("gone", "preempts", "a", A_NODES[2:])
    high = shaped(queue_name="quota", tenant="t1", gpus=8, pods=4, priority=2, submitted_at=1.0)
    other = shaped(queue_name="quota", tenant="t1", gpus=8, pods=4, priority=0, submitted_at=2.0)
    result = parked_then([high, other], [low, gone, running_job("full", "preempts", "b", B_NODES)], ["gone"])
    assert result.order == (high.id,) and result.placements == ()


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
