"""The scheduler keeps the pending jobs between cycles and reads only the new ones; its decisions are a full
read's (SQLite and PostgreSQL)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from broker.engine.placement import Backlog, Parked, schedule
from broker.engine.placement.model import QUEUE_ORDER
from broker.services.scheduler import SchedulerService
from broker.store.db.models import PLACEMENT_LIVE_STATES, Cluster, Job, Node, Placement, Queue, utcnow
from broker.store.inventory import PodHold, member_inventory, write_inventory
from broker.store.scheduling import PendingJobs, commit_cycle, pending as scheduling_module, read_inventory
from clusters.topology import ResolvedHyperNode, Topology
from tests.placement.fixtures import GPU
from tests.scheduler.conftest import EPOCH, add_cluster, add_queue, crash_at_the_events, submit


class Clock:
    def __init__(self) -> None:
        self.moment = EPOCH + timedelta(minutes=1)

    def __call__(self):
        return self.moment


def decisions(inventory, parked: Parked = Parked()) -> tuple:
    """What a cycle over this read decides, in a form two reads can be compared by, and its waiting jobs."""
    result = schedule(inventory.snapshot, inventory.pending, parked=parked)
    return (sorted((p.job_id, p.part or "", p.cluster, p.hypernode, p.assignments) for p in result.placements),
            sorted((p.job_id, p.preemptor, p.cluster) for p in result.preemptions),
            sorted((h.job_id, h.cluster, h.nodes) for h in result.holds.values())), result


def by_queue(backlog: Backlog) -> dict[str, list[str]]:
    return {name: [job.id for job in jobs] for name, jobs in backlog.queues.items() if jobs}


def assert_same_as_a_full_read(db, scheduler: SchedulerService, foreign_reasons_at: int | None = None) -> int:
    """The kept rows are those a full read finds; the cycle places, preempts and holds as a full one, and says
    the same of every job it decided (the inadmissible ones it did not decide do not fit in a full cycle either).
    The stored reasons kept are those a full read finds, unless another scheduler rewrote some since this
    one's last full read (`foreign_reasons_at`: its count of full reads then). Returns how many jobs it did not
    decide."""
    incremental = scheduler.read()
    with db.read() as session:
        full = read_inventory(session, now=scheduler.now().timestamp())
    assert sorted(incremental.pending, key=lambda j: j.id) == sorted(full.pending, key=lambda j: j.id)
    assert by_queue(incremental.pending) == by_queue(full.pending)
    for jobs in incremental.pending.queues.values():  # each queue in its order, as a cycle takes it
        assert [job.id for job in jobs] == [job.id for job in sorted(jobs, key=QUEUE_ORDER)]
    # the kept clusters and live placements: what a full read builds (by name, by id)
    assert (incremental.inputs[0], incremental.inputs[3], incremental.cluster_ids) == (
        full.inputs[0], full.inputs[3], full.cluster_ids)
    assert (incremental.unplaceable, incremental.tenant_ids, incremental.generations) == (
        full.unplaceable, full.tenant_ids, full.generations)
    if scheduler.pending.full_reads != foreign_reasons_at:
        assert incremental.records == full.records
    parked = scheduler.pending.still_parked(incremental)
    admissions, result = decisions(incremental, parked)
    full_admissions, full_result = decisions(full)
    assert admissions == full_admissions
    skipped = {job.id for job in incremental.pending} - set(result.order)
    assert skipped <= parked.jobs and skipped <= set(full_result.waiting)
    assert {**full_result.waiting, **{job_id: result.waiting[job_id] for job_id in result.waiting}} == \
        full_result.waiting
    return len(skipped)


RDMA = "rdma/hca"


def _live(session) -> list[Placement]:
    return list(session.scalars(select(Placement).where(Placement.state.in_(PLACEMENT_LIVE_STATES))
                                .order_by(Placement.id)))


def report_pods(session, rnd: random.Random) -> None:
    """As the inventory sync writes one member's rows: the pods of some of its live placements, most on the nodes they
    were assigned, some where the kube-scheduler put them instead (with a device a webhook added, which their
    reservation lacks), and someone else's pods on some nodes (`write_inventory`, its bulk writes)."""
    cluster = session.scalar(select(Cluster).where(Cluster.name == rnd.choice(["eu-west", "us-east"])))
    nodes = {node.name: {"labels": node.labels, "taints": node.taints, "unschedulable": node.unschedulable,
                         "ready": node.ready, "allocatable": node.allocatable}
             for node in session.scalars(select(Node).where(Node.cluster_id == cluster.id))}
    holds = [PodHold(a["node"] if rnd.random() < 0.7 else rnd.choice(sorted(nodes)),  # or where the kube-scheduler
                     {GPU: 1000 * rnd.choice([1, 2]), RDMA: 1000, "pods": 1000}, str(placement.id))  # put it instead
             for placement in _live(session) if placement.cluster_id == cluster.id and rnd.random() < 0.6
             for a in placement.assignments]
    holds += [PodHold(name, {GPU: 2000, "pods": 1000}, None) for name in nodes if rnd.random() < 0.2]
    topology = Topology([ResolvedHyperNode(h.name, h.tier, h.parent, tuple(h.nodes)) for h in cluster.hypernodes])
    write_inventory(session, cluster, member_inventory(nodes, holds, topology, "crd"), utcnow())


def _jobs(session, state: str) -> list[Job]:
    return list(session.scalars(select(Job).where(Job.state == state, Job.cancel_requested_at.is_(None))
                                .order_by(Job.id)))


@pytest.mark.parametrize(("seed", "merged_one_by_one"), [*((seed, 64) for seed in range(4)), (0, 0), (1, 0)])
def test_a_sequence_of_changes_is_decided_as_a_full_read_would(db, setup, settings, seed, merged_one_by_one,
                                                               monkeypatch):
    """Submissions, cancels, finished and evicted (requeued, backing off) jobs, capacity edits, time crossing
    starvation_after, another scheduler's commit (and one of its jobs evicted at once), the inventory sync's pods,
    placements starting or being deleted, a cluster NotReady and back: before every cycle, the kept pending jobs,
    clusters and live placements read as every row. (The jobs looked at one by one each cycle go into their queues'
    order one by one, or with each queue sorted at once: `MERGED_ONE_BY_ONE`.)"""
    monkeypatch.setattr(scheduling_module, "MERGED_ONE_BY_ONE", merged_one_by_one)
    rnd, clock = random.Random(seed), Clock()
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=clock)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=2)
        add_cluster(session, "us-east", leaves=1)
        queues = [add_queue(session, "q-a", tenant="research"),
                  add_queue(session, "q-b", tenant="vision", preemption="LowerPriority")]
    names, foreign_reasons_at = iter(range(10_000)), None
    for _ in range(40):
        change = rnd.choice(["submit", "submit", "submit", "cancel", "finish", "evict", "capacity", "time", "other",
                             "pods", "pods", "start", "cluster"])
        foreign_admitted = []
        if change == "other":  # capacity freed, and another scheduler places a job this one saw waiting
            with setup() as session:
                for node in session.scalars(select(Node)):
                    node.allocatable = {**node.allocatable, GPU: 16_000}
            outcome = SchedulerService(db, settings, now=clock).run_once()
            # If it placed nothing, it may have rewritten waiting reasons this one keeps (possible only without
            # the lease): only those may differ, until this one's next full read.
            foreign_admitted = outcome.admitted
            if not outcome.placements:
                foreign_reasons_at = scheduler.pending.full_reads
        with setup() as session:
            if change == "submit":
                for _ in range(rnd.randint(1, 4)):
                    queue = session.get(Queue, rnd.choice(queues).id)
                    annotations = {"archipelago.io/placement": "split"} if rnd.random() < 0.3 else None
                    parts = (("workers", 1, rnd.choice([1, 2, 4]), rnd.choice([2, 4, 8])), ("eval", 1, 1, 2))
                    job = submit(session, queue, f"job-{next(names)}", parts=parts if annotations else None,
                                 gpus=rnd.choice([2, 4, 8]), pods=rnd.choice([1, 2, 4, 8]), annotations=annotations,
                                 priority=rnd.choice([500, 1000, 1500]))
                    if rnd.random() < 0.2:  # submitted before placement records were: its manifest is parsed
                        job.placement_spec = None
                        if rnd.random() < 0.5:  # and no longer parses
                            job.manifest = {**job.manifest, "kind": "Deployment"}
            elif change == "cancel" and (queued := _jobs(session, "Queued")):
                rnd.choice(queued).cancel_requested_at = clock()
            elif change in ("finish", "evict") and (admitted := _jobs(session, "Admitted")) or foreign_admitted:
                job = rnd.choice(admitted) if change != "other" else session.get(Job, foreign_admitted[0])
                session.execute(update(Placement).where(Placement.job_id == job.id)
                                .values(state="Succeeded" if change == "finish" else "Deleted"))
                if change == "finish":
                    job.state = "Succeeded"
                else:  # as `dispatch.evict_unready` requeues it: back-off, a cluster to avoid, a reason
                    job.state, job.reason = "Queued", "evicted: placed again after a while"
                    job.requeue_at = clock() + timedelta(seconds=rnd.choice([0, 30]))
                    job.avoid = {"eu-west": (clock() + timedelta(minutes=10)).isoformat()}
            elif change == "capacity":
                node = rnd.choice(list(session.scalars(select(Node).order_by(Node.id))))
                node.allocatable = {**node.allocatable, GPU: rnd.choice([0, 4000, 8000])}
            elif change == "pods":  # the inventory sync: some placements' pods appear, someone else's come and go
                report_pods(session, rnd)
            elif change == "start" and (live := _live(session)):
                placement = rnd.choice(live)
                placement.state = rnd.choice(["Running", "Deleting"])
                placement.started_at = clock()
            elif change == "cluster":
                cluster = session.scalar(select(Cluster).where(Cluster.name == rnd.choice(["eu-west", "us-east"])))
                cluster.state = "NotReady" if cluster.state == "Ready" else "Ready"
            elif change == "time":
                clock.moment += timedelta(seconds=rnd.choice([20, 20, 20, 1000]))
        assert_same_as_a_full_read(db, scheduler, foreign_reasons_at)
        scheduler.run_once()


def test_cycles_read_only_new_rows_until_in_doubt(db, setup, settings):
    """One full read, then new rows only; another scheduler's commit, a failed cycle or the resync period each
    make the next read a full one again."""
    clock = Clock()
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 600}), now=clock)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=2)
        queue = add_queue(session)
        submit(session, queue, "first", gpus=8, pods=4)
    scheduler.run_once()
    for name, pods in (("second", 2), ("too-big", 8)):
        with setup() as session:
            submit(session, session.get(Queue, queue.id), name, gpus=8, pods=pods)
        scheduler.run_once()
    assert scheduler.pending.full_reads == 1
    assert set(scheduler.pending.rows) == {str(j.id) for j in _queued(db)} != set()

    with setup() as session:
        submit(session, session.get(Queue, queue.id), "small", gpus=1, pods=1)
    assert SchedulerService(db, settings, now=clock).run_once().placements == 1  # another scheduler's commit
    scheduler.run_once()
    assert scheduler.pending.full_reads == 2

    with setup() as session:
        submit(session, session.get(Queue, queue.id), "fits", gpus=1, pods=1)

    with crash_at_the_events(db):
        scheduler.run_once()
    scheduler.run_once()
    assert scheduler.pending.full_reads == 3

    clock.moment += timedelta(seconds=600)
    scheduler.run_once()
    assert scheduler.pending.full_reads == 4


def test_reading_the_pending_rows_steps_aside_once_a_row(db, setup, monkeypatch):
    """A new leader parses every pending manifest: between rows it lets the API's requests go first
    (`broker.process.courtesy`), on a full read as on a read of the new rows; and so along the rows whose reasons its commit
    changed (every pending one, after a new leader's first cycle)."""
    with setup() as session:
        add_cluster(session, "eu-west")
        queue = add_queue(session)
        for i in range(12):
            submit(session, queue, f"job-{i}")
    pauses = []
    pending = PendingJobs(resync_interval=1e9, pause=lambda: pauses.append(1))
    with db.read() as session:
        read_inventory(session, now=EPOCH.timestamp() + 60, pending=pending)
    assert len(pauses) >= 12
    with setup() as session:
        for i in range(5):
            submit(session, session.get(Queue, queue.id), f"more-{i}")
    pauses.clear()
    with db.read() as session:
        inventory = read_inventory(session, now=EPOCH.timestamp() + 60, pending=pending)
    assert pending.full_reads == 1 and len(pauses) >= 5
    result = schedule(inventory.snapshot, inventory.pending)
    outcome = commit_cycle(db, inventory, result)
    monkeypatch.setattr(scheduling_module, "JOBS_BETWEEN_PAUSES", 2)
    pauses.clear()
    pending.committed(inventory, result, outcome)
    assert len(outcome.changed) >= 9 and len(pauses) >= len(outcome.changed) // 2


def test_three_jobs_cancelled_while_three_others_come_back_are_read_though_their_ids_and_squares_add_up_alike(
        db, setup, settings):
    """Between two cycles three pending jobs are cancelled and three this scheduler admitted are requeued, as many
    ids, their sums and the sums of their squares alike (1, 5, 6 out and 2, 3, 7 in), none above the highest kept:
    the kept rows still become a full read's."""
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=Clock())
    fitting = (2, 3, 7)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        jobs = [submit(session, queue, f"job-{i}", gpus=1 if i in fitting else 8, pods=1 if i in fitting else 64)
                for i in range(9)]  # the others never fit
        session.flush()
        ids = [job.id for job in jobs]
    assert scheduler.run_once().placements == 3
    with setup() as session:
        for i in (1, 5, 6):
            session.get(Job, ids[i]).cancel_requested_at = utcnow()
        for i in fitting:
            session.execute(update(Placement).where(Placement.job_id == ids[i]).values(state="Deleted"))
            session.get(Job, ids[i]).state = "Queued"
    assert_same_as_a_full_read(db, scheduler)
    assert scheduler.pending.full_reads == 1  # the digest told, not a resync
    assert set(scheduler.pending.rows) == {str(ids[i]) for i in (0, 2, 3, 4, 7, 8)}


def _queued(db) -> list[Job]:
    with db.sessions() as session:
        return list(session.scalars(select(Job).where(Job.state == "Queued")))


def undecided(scheduler: SchedulerService) -> set[str]:
    """The pending jobs the next cycle would not decide again."""
    inventory = scheduler.read()
    result = schedule(inventory.snapshot, inventory.pending, parked=scheduler.pending.still_parked(inventory))
    return {job.id for job in inventory.pending} - set(result.order)


def test_a_job_that_does_not_fit_is_decided_again_only_once_capacity_is_freed_or_it_waited_too_long(
        db, setup, settings):
    clock = Clock()
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=clock)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        first = submit(session, queue, "first", gpus=8, pods=4)
        big = submit(session, queue, "big", gpus=8, pods=4)
    clock.moment = big.submitted_at + timedelta(seconds=60)
    assert scheduler.run_once().admitted == [first.id]
    with setup() as session:
        small = submit(session, session.get(Queue, queue.id), "small", gpus=1, pods=1)
    assert undecided(scheduler) == {str(big.id)}
    assert scheduler.run_once().admitted == []
    assert undecided(scheduler) == {str(big.id), str(small.id)}

    clock.moment += timedelta(seconds=settings.placement_starvation_after)  # big waited too long: a hold
    assert undecided(scheduler) == set()
    clock.moment -= timedelta(seconds=settings.placement_starvation_after)
    with setup() as session:  # the cluster changed, but it has no room for them still
        session.scalars(select(Cluster)).one().labels = {"zone": "a"}
    assert undecided(scheduler) == {str(big.id), str(small.id)}

    with setup() as session:  # first ends: its capacity is free again
        session.execute(update(Placement).where(Placement.job_id == first.id).values(state="Succeeded"))
        session.get(Job, first.id).state = "Succeeded"
    assert undecided(scheduler) == {str(small.id)}  # big, before it in the queue, takes all that came back
    assert scheduler.run_once().admitted == [big.id]


def test_a_split_job_parked_for_want_of_room_is_decided_again_when_any_cluster_frees_room(db, setup, settings):
    """Capacity back on one cluster may not hold the whole split job, yet let its parts go each to a cluster."""
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=Clock())
    with setup() as session:
        for name in ("a", "b"):
            add_cluster(session, name, leaves=1)  # 4 nodes of 8 GPUs each
        queue = add_queue(session)
        others = add_queue(session, "others", tenant="vision")  # whose room coming back frees no quota of ours
        filler = submit(session, others, "filler", gpus=8, pods=4)
        pair = submit(session, queue, "pair", parts=(("x", 1, 4, 8), ("y", 1, 4, 8)),
                      annotations={"archipelago.io/placement": "split"})
    assert scheduler.run_once().admitted == [filler.id]  # one cluster left: room for one part, not both
    assert scheduler.run_once().admitted == []
    assert undecided(scheduler) == {str(pair.id)}
    with setup() as session:  # filler ends: 32 GPUs back on its cluster, not the 64 the whole pair asks
        session.execute(update(Placement).where(Placement.job_id == filler.id).values(state="Succeeded"))
        session.get(Job, filler.id).state = "Succeeded"
    assert undecided(scheduler) == set()
    assert scheduler.run_once().admitted == [pair.id]
    with db.sessions() as session:
        clusters = sorted(session.scalars(select(Placement.cluster_name).where(Placement.job_id == pair.id)))
    assert clusters == ["a", "b"]


def test_a_large_backlog_read_in_full_is_frozen_out_of_full_garbage_collections(db, setup, settings, monkeypatch):
    """Past LONG_LIVED_ROWS pending jobs, a full read leaves its rows frozen (gc.freeze); a smaller backlog freezes
    nothing."""
    import gc

    from broker.services import scheduler as scheduler_module
    gc.unfreeze()
    try:
        scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=Clock())
        with setup() as session:
            add_cluster(session, "eu-west", leaves=1)
            queue = add_queue(session)
            for name in ("big-a", "big-b", "big-c", "big-d", "big-e", "big-f"):
                submit(session, queue, name, gpus=8, pods=8)  # 64 GPUs: none fits the 32
        scheduler.read()
        assert gc.get_freeze_count() == 0
        monkeypatch.setattr(scheduler_module, "LONG_LIVED_ROWS", 6)
        scheduler.pending.forget()
        scheduler.read()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        scheduler.read()  # not a full read: nothing more is frozen
        assert gc.get_freeze_count() <= frozen  # (frozen objects freed since are no longer counted)
    finally:
        gc.unfreeze()


def test_a_new_leaders_first_full_read_freezes_without_a_full_collection(db, setup, settings, monkeypatch):
    """A full collection over 100,000 pending jobs holds the GIL 0.4–0.8 s: not at the first full read, while the
    API's requests wait on a new leader's first cycle already, but at every FULL_COLLECTION_EVERY-th freeze, which
    also frees what the earlier ones froze and became garbage in a reference cycle; full reads of a backlog too
    small to freeze do not count."""
    import gc

    from broker.services import scheduler as scheduler_module
    collections = []
    collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or collect(*args))
    monkeypatch.setattr(scheduler_module, "LONG_LIVED_ROWS", 1)
    monkeypatch.setattr(scheduler_module, "FULL_COLLECTION_EVERY", 3)
    gc.unfreeze()
    try:
        scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=Clock())
        with setup() as session:
            add_cluster(session, "eu-west", leaves=1)
            submit(session, add_queue(session), "big", gpus=8, pods=8)
        for _ in range(6):
            scheduler.pending.forget()
            scheduler.read()
        assert scheduler.pending.full_reads == 6 and len(collections) == 2
        monkeypatch.setattr(scheduler_module, "LONG_LIVED_ROWS", 2)  # one pending job: too few to freeze
        for _ in range(2):
            scheduler.pending.forget()
            scheduler.read()
        monkeypatch.setattr(scheduler_module, "LONG_LIVED_ROWS", 1)
        for expected in (2, 2, 3):  # the eleventh full read, the third freeze since the last collection, collects
            scheduler.pending.forget()
            scheduler.read()
            assert len(collections) == expected
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_cycle_that_reads_the_whole_backlog_runs_with_the_collector_off(db, setup, settings, monkeypatch):
    """A new leader's first cycle, the next after one that failed, and one a resync interval later read, decide and
    keep every pending job with the collector off (young collections would only promote them), and turn it on again,
    failed or not; past LONG_LIVED_ROWS, what a full read's cycle kept after the read froze the rows is frozen too
    (below, nothing: no collection would ever look through it again). A cycle that reads only the new rows leaves
    the collector on."""
    import gc

    from broker.services import scheduler as scheduler_module
    gc.unfreeze()
    collector_on, freezes = [], []
    commit, freeze = scheduler_module.commit_cycle, gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(len(collector_on)) or freeze())

    def committing(*args):
        collector_on.append(gc.isenabled())
        if len(collector_on) == 1:
            raise RuntimeError("the database went away")
        return commit(*args)

    monkeypatch.setattr(scheduler_module, "commit_cycle", committing)
    clock = Clock()
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 300}), now=clock)
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        submit(session, queue, "big", gpus=8, pods=8)  # 64 GPUs: it stays pending
    try:
        assert gc.isenabled()
        with pytest.raises(RuntimeError):
            scheduler.run_once()
        assert collector_on == [False] and gc.isenabled() and gc.get_freeze_count() == 0
        scheduler.run_once()  # in doubt: every row again; one pending job, below LONG_LIVED_ROWS: nothing frozen
        assert collector_on == [False, False] and gc.isenabled() and gc.get_freeze_count() == 0
        monkeypatch.setattr(scheduler_module, "LONG_LIVED_ROWS", 1)
        scheduler.pending.forget()
        scheduler.run_once()
        assert collector_on == [False, False, False] and gc.isenabled()
        assert freezes == [2, 3] and gc.get_freeze_count() > 0  # the rows after the read, their new reasons at the end
        gc.unfreeze()
        with setup() as session:
            submit(session, queue, "another", gpus=8, pods=8)
        scheduler.run_once()
        assert collector_on == [False, False, False, True] and gc.isenabled() and freezes == [2, 3]
        clock.moment += timedelta(seconds=300)
        scheduler.run_once()  # a resync
        assert collector_on == [False, False, False, True, False] and gc.isenabled()
    finally:
        gc.unfreeze()
