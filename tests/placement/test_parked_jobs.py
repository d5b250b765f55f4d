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

from broker.engine.placement import Config, Parked, PendingJob, RunningPlacement, Snapshot, Tenant, schedule, shape_of
from tests.placement.fixtures import GPU, cluster, fabric, job, queue

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
