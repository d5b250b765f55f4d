"""Placement benchmark: throughput, decision latency, growth, one big gang, topology quality, memory.

    python bench/placement.py [--jobs N --clusters M --hypernodes H] [--seed S] [--backlogs 10000,100000]

H counts HyperNodes across the whole federation (a tree per cluster: leaves of 8 nodes, spines over
4 leaves, one root). The throughput cycle is the scheduler service's, in a process of its own (a new leader's,
nothing parsed yet, the garbage collector off as the service runs a cycle that reads every row): the inventory and
the pending jobs (with their manifests and placement records, as submission stores them) sit in an SQLite file of
the project's models; the cycle reads the snapshot (`broker.store.scheduling.read_inventory`, each job's spec rebuilt
from its record), decides, and commits every decision
in one transaction, then the waiting reasons (`broker.store.scheduling.commit_cycle`). The jobs arrive as
one burst a minute before the cycle (none has waited past starvation_after); the engine's cycle is timed again with every job
starving, where each that does not fit may look for nodes to hold.
The incremental cycles run the scheduler service (`SchedulerService.run_once`) over each backlog until
its cycles settle (the federation full, the jobs that do not fit known inadmissible), then time the
cycle after 100 more submissions (the median of five, each backlog's scheduler in a process of its own, the backlogs taking turns), and the cycle after one admitted job ends
(capacity freed: it must admit); then, with a scheduler whose clock is 2,000 s ahead (every job waited past starvation_after:
the oldest take holds), settle again and time the cycle after 100 more. A scheduler process of its own
then runs two cycles over the backlog (the first decides every job, as a new leader's): its peak RSS.
Prints a table, then one JSON object as the last line. The API's latency in the leader process while it
schedules a 100,000 backlog runs a broker and a simulator of their own: bench/leader_api.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datetime import datetime, timedelta, timezone  # noqa: E402

from sqlalchemy import insert, select, update  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from bench import dra_fleet  # noqa: E402
from broker.engine.jobset import parse_jobset, placement_record  # noqa: E402
from broker.engine.placement import (GPU, Cluster, HyperNode, Node, PendingJob, Queue, Snapshot, Tenant, schedule)  # noqa: E402
from broker.engine.placement.quality import first_fit, replay  # noqa: E402
from broker.process.settings import Settings  # noqa: E402
from broker.services.scheduler import SchedulerService, collector_off  # noqa: E402
from broker.store.db import models  # noqa: E402
from broker.store.db.runtime import Database  # noqa: E402
from broker.store.db.session import make_engine, make_sessionmaker  # noqa: E402
from broker.store.scheduling import commit_cycle, read_inventory  # noqa: E402

GiB = 2**30 * 1000
# The cycle runs a minute after a burst of submissions began: no job has waited past starvation_after
# (900 s). STARVING is when every job has: each that does not fit may look for nodes to hold.
FRESH, STARVING = 60.0, 1e9
TENANTS, QUEUES_PER_TENANT = 5, 2


def inventory(clusters: int, hypernodes: int, nodes_per_leaf: int = 8, leaves_per_spine: int = 4) -> list[Cluster]:
    per_cluster = max(3, hypernodes // clusters)
    leaves = max(1, (per_cluster - 1) * leaves_per_spine // (leaves_per_spine + 1))
    result = []
    for c in range(clusters):
        nodes, trees = [], []
        spines = (leaves + leaves_per_spine - 1) // leaves_per_spine
        for s in range(spines):
            leaf_names = [f"leaf-{l}" for l in range(s * leaves_per_spine, min(leaves, (s + 1) * leaves_per_spine))]
            trees.append(HyperNode(f"spine-{s}", 2, "root", tuple(leaf_names)))
            for leaf in leaf_names:
                members = tuple(f"{leaf}-n{i}" for i in range(nodes_per_leaf))
                trees.append(HyperNode(leaf, 1, f"spine-{s}", (), members))
                nodes += [Node(n, {"cpu": 96_000, "memory": 1024 * GiB, GPU: 8000}) for n in members]
        trees.append(HyperNode("root", 3, None, tuple(f"spine-{s}" for s in range(spines))))
        region = ("eu", "us", "ap")[c % 3]
        result.append(Cluster(f"c{c:03d}", "Ready", {"region": region}, (), True, tuple(nodes), tuple(trees)))
    return result


def queues() -> tuple[list[Tenant], list[Queue]]:
    tenants = [Tenant(f"tenant-{t}", 1.0 + t % 2) for t in range(TENANTS)]
    qs = [Queue(f"q-{t}-{k}", f"tenant-{t}", 1.0, 0, {}, None, "LowerPriority" if k else "Never")
          for t in range(TENANTS) for k in range(QUEUES_PER_TENANT)]
    return tenants, qs


def manifest(name: str, rnd: random.Random) -> dict:
    def part(part_name: str) -> dict:
        gpus = rnd.choice([1, 2, 4, 8, 8])
        return {"name": part_name, "replicas": rnd.choice([1, 1, 2]), "template": {"spec": {
            "parallelism": rnd.choice([1, 2, 4, 4, 8]), "template": {"spec": {"containers": [{
                "name": "main", "image": "x", "resources": {
                    "requests": {"cpu": str(4 * gpus), "memory": f"{32 * gpus}Gi"}, "limits": {GPU: str(gpus)}}}]}}}}}

    kind = rnd.random()
    annotations = {}
    parts = [part("workers")]
    if kind < 0.2:
        annotations = {"archipelago.io/network-topology-mode": "hard",
                       "archipelago.io/highest-tier-allowed": str(rnd.choice([1, 2]))}
    elif kind < 0.3:
        annotations = {"archipelago.io/placement": "split"}
        parts.append(part("eval"))
    elif kind < 0.4:
        annotations = {"archipelago.io/cluster-selector": "region in (eu,us)"}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "annotations": annotations}, "spec": {"replicatedJobs": parts}}


def submissions(n: int, seed: int) -> list[tuple[str, str, dict, int]]:
    """(tenant, queue, manifest, priority) of n jobs, in submission order."""
    rnd = random.Random(seed)
    result = []
    for i in range(n):
        t, k = rnd.randrange(TENANTS), rnd.randrange(QUEUES_PER_TENANT)
        body = manifest(f"job-{i}", rnd)
        result.append((f"tenant-{t}", f"q-{t}-{k}", body, rnd.choice([0, 0, 1, 2])))
    return result


def workload(n: int, seed: int) -> list[PendingJob]:
    """A burst: one submission per millisecond from time 0."""
    return [PendingJob(str(i + 1), tenant, queue, priority, i / 1000, parse_jobset(body))
            for i, (tenant, queue, body, priority) in enumerate(submissions(n, seed))]


def snapshot(clusters: int, hypernodes: int, nodes_per_leaf: int = 8, now: float = FRESH, running=()) -> Snapshot:
    tenants, qs = queues()
    return Snapshot(inventory(clusters, hypernodes, nodes_per_leaf), qs, tenants, running, now)


# -- the scheduler's cycle on an SQLite inventory of the project's models ---------------------------------
def database(path: str, clusters: int, hypernodes: int, jobs: int, seed: int, dra: bool = False):
    """The federation of `inventory` and `jobs` Queued submissions, stored as the broker stores them; `dra`: its GPUs
    published as partitionable devices and asked through claims (bench/dra_fleet.py)."""
    submitted = submissions(jobs, seed)
    specs = [parse_jobset(body) for _, _, body, _ in submitted]
    shapes: dict = {}
    if dra:
        specs = []
        for _, _, body, _ in submitted:
            spec, demands = dra_fleet.claimed_spec(body)
            specs.append(spec)
            shapes.update(kv for d in demands for kv in d.counted().items())
    engine = make_engine(f"sqlite:///{path}")
    models.Base.metadata.create_all(engine)
    tenants, qs = queues()
    epoch = datetime.now(timezone.utc) - timedelta(seconds=FRESH)
    with Session(engine) as session, session.begin():
        session.execute(insert(models.Tenant), [{"id": i + 1, "name": t.name} for i, t in enumerate(tenants)])
        tenant_id = {t.name: i + 1 for i, t in enumerate(tenants)}
        session.execute(insert(models.Queue), [
            {"id": i + 1, "tenant_id": tenant_id[q.tenant], "name": q.name, "preemption_policy": q.preemption}
            for i, q in enumerate(qs)])
        queue_id = {q.name: i + 1 for i, q in enumerate(qs)}
        for c, cluster in enumerate(inventory(clusters, hypernodes), start=1):
            session.execute(insert(models.Cluster), [{
                "id": c, "name": cluster.name, "api_server": f"https://{cluster.name}:6443",
                "kubeconfig_encrypted": b"-", "labels": dict(cluster.labels), "state": cluster.state,
                "jobset_crd": cluster.jobset_crd}])
            use = dra_fleet.fleet_use([n.name for n in cluster.nodes], shapes) if dra else {}
            session.execute(insert(models.Node), [
                {"cluster_id": c, "name": n.name, "device_use": use.get(n.name, {}),
                 "allocatable": dra_fleet.without_gpus(dict(n.allocatable)) if dra else dict(n.allocatable)}
                for n in cluster.nodes])
            tree = {h.name: h for h in cluster.hypernodes}

            def beneath(name: str) -> list[str]:
                return [*tree[name].nodes, *(n for child in tree[name].children for n in beneath(child))]

            session.execute(insert(models.HyperNode), [
                {"cluster_id": c, "name": h.name, "tier": h.tier, "parent": h.parent, "nodes": beneath(h.name)}
                for h in cluster.hypernodes])
        session.execute(insert(models.Job), [
            {"id": i + 1, "tenant_id": tenant_id[tenant], "queue_id": queue_id[queue], "name": body["metadata"]["name"],
             "namespace": "bench", "manifest": body, "placement_spec": placement_record(spec),
             "priority": priority, "submitted_at": epoch + timedelta(milliseconds=i)}
            for i, ((tenant, queue, body, priority), spec) in enumerate(zip(submitted, specs))])
    return engine


def scheduler_cycle(path: str) -> tuple[float, float, float, int]:
    """One scheduler service cycle over the database at `path`, in a process of its own (as a new leader's: nothing
    parsed yet): (read seconds, schedule seconds, commit seconds, placements committed)."""
    cycle = subprocess.run([sys.executable, __file__, "--scheduler-cycle-of", path], capture_output=True, text=True,
                           check=True)
    return tuple(json.loads(cycle.stdout.splitlines()[-1]))


def timed_cycle(path: str) -> tuple[float, float, float, int]:
    """`scheduler_cycle`, in the child."""
    engine = make_engine(f"sqlite:///{path}")
    db = Database(engine, make_sessionmaker(engine))
    with collector_off(True):  # as the service runs a cycle that reads every pending row
        started = time.perf_counter()
        with db.read() as session:
            inventory = read_inventory(session, now=time.time())
        read = time.perf_counter()
        result = schedule(inventory.snapshot, inventory.pending)
        decided = time.perf_counter()
        outcome = commit_cycle(db, inventory, result)
        committed = time.perf_counter()
    return read - started, decided - read, committed - decided, outcome.placements


def add_jobs(engine, count: int, seed: int) -> None:
    """`count` more Queued submissions, as `database` stores them, submitted now."""
    tenant_id = {f"tenant-{t}": t + 1 for t in range(TENANTS)}
    queue_id = {f"q-{t}-{k}": t * QUEUES_PER_TENANT + k + 1 for t in range(TENANTS) for k in range(QUEUES_PER_TENANT)}
    now = datetime.now(timezone.utc)
    with Session(engine) as session, session.begin():
        session.execute(insert(models.Job), [
            {"tenant_id": tenant_id[tenant], "queue_id": queue_id[queue], "name": f"more-{seed}-{i}",
             "namespace": "bench", "manifest": body, "placement_spec": placement_record(parse_jobset(body)),
             "priority": priority, "submitted_at": now}
            for i, (tenant, queue, body, priority) in enumerate(submissions(count, seed))])


def free_one(engine) -> None:
    """The oldest admitted job ends: its capacity is free."""
    with Session(engine) as session, session.begin():
        job = session.scalars(select(models.Job).where(models.Job.state == "Admitted").order_by(models.Job.id)
                              .limit(1)).one()
        session.execute(update(models.Placement).where(models.Placement.job_id == job.id)
                        .values(state="Succeeded"))
        job.state = "Succeeded"


ROUNDS = 5  # cycles timed per backlog, taking turns: the median of each backlog's, over the same minutes


def incremental_cycles(directory: str, clusters: int, hypernodes: int, backlogs: list[int], seed: int) -> dict:
    """The scheduler service over each backlog (jobs submitted), once its cycles have settled (the federation
    full, the jobs that do not fit known inadmissible), per backlog: seconds of the cycle after 100 submissions
    (`changed_s`), from a job's end to the next cycle's admissions (`freed_s`), and of the cycle after 100 more
    submissions once every job has waited past starvation_after (`starving_s`: a new scheduler whose clock is
    2,000 s ahead); `pending` jobs; `rss_mb`, the peak RSS of a scheduler process of its own over the backlog.
    Each backlog's scheduler runs in a process of its own (`backlog_scheduler`: no heap but its own for its
    collections to walk), and the backlogs take turns, a cycle each, so that their ratio does not follow the
    machine's load from one minute to the next."""
    paths = {jobs: os.path.join(directory, f"backlog-{jobs}.db") for jobs in backlogs}
    for jobs, path in paths.items():
        database(path, clusters, hypernodes, jobs, seed).dispose()
    figures: dict[int, dict] = {jobs: {} for jobs in backlogs}
    for name, ahead in (("changed_s", 0), ("starving_s", 2_000)):
        schedulers = {jobs: subprocess.Popen([sys.executable, __file__, "--backlog-scheduler-of", path,
                                              "--ahead", str(ahead)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             text=True) for jobs, path in paths.items()}

        def ask(jobs: int, command: str) -> dict:
            scheduler = schedulers[jobs]
            scheduler.stdin.write(command + "\n")
            scheduler.stdin.flush()
            return json.loads(scheduler.stdout.readline())

        for jobs in backlogs:
            ask(jobs, "settle")
        seconds: dict[int, list[float]] = {jobs: [] for jobs in backlogs}
        for round_ in range(ROUNDS):
            for jobs in backlogs:
                seconds[jobs].append(ask(jobs, f"add {seed + 1 + ahead + 10_000 * round_}")["seconds"])
        for jobs in backlogs:
            figures[jobs][name] = statistics.median(seconds[jobs])
            if not ahead:
                freed = ask(jobs, "free")
                assert freed["admitted"], "the freed capacity admitted nothing"
                figures[jobs]["freed_s"], figures[jobs]["pending"] = freed["seconds"], freed["pending"]
        for scheduler in schedulers.values():
            scheduler.stdin.close()
            if scheduler.wait() != 0:
                raise RuntimeError(f"a backlog's scheduler exited with {scheduler.returncode}")
    for jobs, path in paths.items():
        rss = subprocess.run([sys.executable, __file__, "--scheduler-rss-of", path], capture_output=True,
                             text=True, check=True)
        figures[jobs]["rss_mb"] = float(rss.stdout.split()[-1])
    return figures


def backlog_scheduler(path: str, ahead: float) -> None:
    """`incremental_cycles`' child: a scheduler service over the backlog at `path` whose clock is `ahead` seconds
    ahead, answering one JSON line per command on stdin: `settle` (cycles until one places nothing and found
    inadmissible jobs, then one more), `add SEED` (100 more submissions, then a cycle: its `seconds`), `free` (the
    oldest admitted job ends, then a cycle: its `seconds`, whether it `admitted`, how many are `pending`)."""
    engine = make_engine(f"sqlite:///{path}")
    service = SchedulerService(Database(engine, make_sessionmaker(engine)), Settings(database_url=f"sqlite:///{path}"),
                               now=lambda: models.utcnow() + timedelta(seconds=ahead))
    for command in sys.stdin:
        verb, *argument = command.split()
        if verb == "settle":
            while service.run_once().placements or not service.pending.parked:
                pass
            service.run_once()
            answer: dict = {}
        elif verb == "add":
            add_jobs(engine, 100, int(argument[0]))
            started = time.perf_counter()
            service.run_once()
            answer = {"seconds": time.perf_counter() - started}
        elif verb == "free":
            free_one(engine)
            started = time.perf_counter()
            outcome = service.run_once()
            answer = {"seconds": time.perf_counter() - started, "admitted": bool(outcome.admitted),
                      "pending": len(service.pending.rows)}
        else:
            raise SystemExit(f"unknown command {verb!r}: settle, add SEED or free")
        print(json.dumps(answer), flush=True)
    engine.dispose()


def scheduler_rss(path: str) -> float:
    """Peak RSS (MB) of this process once a scheduler has run two cycles over the backlog at `path`: the first
    reads and decides every pending job, as a new leader does."""
    engine = make_engine(f"sqlite:///{path}")
    service = SchedulerService(Database(engine, make_sessionmaker(engine)), Settings(database_url=f"sqlite:///{path}"))
    service.run_once()
    service.run_once()
    # VmHWM, not getrusage's ru_maxrss: Linux keeps that one across execve, so a child would report its parent's peak
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


# -- measurements ----------------------------------------------------------------------------------------
def cycle(jobs: int, clusters: int, hypernodes: int, seed: int, now: float = FRESH) -> float:
    """Seconds the engine takes to decide one cycle over `jobs` pending jobs (no I/O)."""
    s, pending = snapshot(clusters, hypernodes, now=now), workload(jobs, seed)
    started = time.perf_counter()
    schedule(s, pending)
    return time.perf_counter() - started


def decision_latencies(clusters: int, hypernodes: int, count: int, seed: int) -> list[float]:
    """One decision per call, on a federation filling up."""
    s, pending = snapshot(clusters, hypernodes), workload(count, seed)
    times = []
    for job in pending:
        started = time.perf_counter()
        schedule(s, [job])
        times.append(time.perf_counter() - started)
    return times


def gang_decision(hypernodes: int, seed: int) -> float:
    """The slowest of a few big gangs (hard tier 2, soft spanning) in one cluster of `hypernodes` HyperNodes."""
    s = snapshot(1, hypernodes, nodes_per_leaf=4)
    rnd = random.Random(seed)
    index = s.clusters["c000"]
    busy = {i: {GPU: 8000 * rnd.choice([0, 0, 1])} for i in range(len(index.nodes))}
    index.apply({i: u for i, u in busy.items() if u[GPU]}, {}, [], +1)
    worst = 0.0
    for pods, gang_annotations in ((16, {"archipelago.io/network-topology-mode": "hard",
                                         "archipelago.io/highest-tier-allowed": "2"}), (96, {}), (512, {})):
        spec = parse_jobset({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "metadata": {"name": "gang", "annotations": gang_annotations},
                             "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {
                                 "parallelism": pods, "template": {"spec": {"containers": [{
                                     "name": "m", "image": "x", "resources": {"limits": {GPU: "8"}}}]}}}}}]}})
        job = PendingJob(f"gang-{pods}", "tenant-0", "q-0-0", 0, 0.0, spec)
        started = time.perf_counter()
        result = schedule(s, [job])
        worst = max(worst, time.perf_counter() - started)
        assert result.placements, result.waiting
    return worst


def topology_quality(clusters: int, hypernodes: int, steps: int, seed: int) -> tuple[float, float, int]:
    """Replay one trace (a job arrives each step, lives 20-200 steps) through the engine and first fit."""
    rnd = random.Random(seed)
    trace = [(job, rnd.randint(20, 200)) for job in workload(steps, seed)]
    shares = []
    for place in (lambda s, j: list(schedule(s, [j]).placements), first_fit):
        eligible, in_one = replay(snapshot(clusters, hypernodes), trace, place)
        shares.append(in_one / max(1, eligible))
    return shares[0], shares[1], eligible


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--hypernodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backlogs", default="10000,100000",
                        help="pending JobSets for the incremental cycles, comma-separated")
    parser.add_argument("--scheduler-rss-of", metavar="PATH", help=argparse.SUPPRESS)  # `scheduler_rss`, in a child
    parser.add_argument("--scheduler-cycle-of", metavar="PATH", help=argparse.SUPPRESS)  # `scheduler_cycle`'s child
    parser.add_argument("--backlog-scheduler-of", metavar="PATH", help=argparse.SUPPRESS)  # `backlog_scheduler`
    parser.add_argument("--ahead", type=float, default=0.0, help=argparse.SUPPRESS)  # its clock
    args = parser.parse_args()
    if args.backlog_scheduler_of:
        backlog_scheduler(args.backlog_scheduler_of, args.ahead)
        return
    if args.scheduler_rss_of:
        print(scheduler_rss(args.scheduler_rss_of))
        return
    if args.scheduler_cycle_of:
        print(json.dumps(timed_cycle(args.scheduler_cycle_of)))
        return
    rows = []

    with tempfile.TemporaryDirectory() as tmp:
        backlog = incremental_cycles(tmp, args.clusters, args.hypernodes,
                                     [int(n) for n in args.backlogs.split(",")], args.seed)
    for jobs, b in backlog.items():
        rows.append(("cycle, 100 changed", f"{b['pending']} pending of {jobs} submitted, 100 more submitted",
                     f"{b['changed_s']:.2f} s"))
        rows.append(("freed to admitted", f"{b['pending']} pending: a job ends, the next cycle admits",
                     f"{b['freed_s']:.2f} s"))
        rows.append(("cycle, all starving", f"{jobs} submitted, all waited past starvation_after, 100 more submitted",
                     f"{b['starving_s']:.2f} s"))
        rows.append(("memory, scheduler", f"peak RSS of a scheduler process over {b['pending']} pending, two cycles",
                     f"{b['rss_mb']:.0f} MB"))

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        database(path, args.clusters, args.hypernodes, args.jobs, args.seed).dispose()
        read_s, schedule_s, commit_s, placed = scheduler_cycle(path)
    cycle_s = read_s + schedule_s + commit_s
    rows.append(("cycle", f"{args.jobs} jobs × {args.clusters} clusters × {args.hypernodes} HyperNodes",
                 f"{placed} placed; SQLite read + parse {read_s:.2f} s, schedule {schedule_s:.2f} s, "
                 f"SQLite commit {commit_s:.2f} s"))
    rows.append(("throughput", "committed placements per second, whole cycle", f"{placed / cycle_s:.0f}/s"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dra.db")
        database(path, args.clusters, args.hypernodes, args.jobs, args.seed, dra=True).dispose()
        dra_read_s, dra_schedule_s, dra_commit_s, dra_placed = scheduler_cycle(path)
    dra_cycle_s = dra_read_s + dra_schedule_s + dra_commit_s
    dra_ratio = (dra_placed / dra_cycle_s) / (placed / cycle_s)
    rows.append(("throughput, DRA fleet", "the same fleet as ResourceSlices (8 GPUs a node as MIG-partitionable "
                                          "devices), pods claiming n × mig-7g.80gb",
                 f"{dra_placed / dra_cycle_s:.0f}/s ({dra_placed} placed), {dra_ratio:.2f}× extended resources"))
    count_s = statistics.median(dra_fleet.COUNTING)
    rows.append(("device count, one member", "what a member's devices hold of each demand (its sync's count), "
                                             f"{len(dra_fleet.COUNTING)} members, median",
                 f"{count_s * 1000:.0f} ms"))

    engine_s = cycle(args.jobs, args.clusters, args.hypernodes, args.seed)
    starving_s = cycle(args.jobs, args.clusters, args.hypernodes, args.seed, now=STARVING)
    rows.append(("starving backlog", f"the engine's cycle when all {args.jobs} jobs waited past starvation_after",
                 f"{starving_s:.2f} s (a minute after the burst: {engine_s:.2f} s)"))
    small_s = cycle(args.jobs // 10, args.clusters, args.hypernodes, args.seed)
    jobs_x10 = engine_s / small_s
    rows.append(("growth: jobs ×10", f"{args.jobs // 10} → {args.jobs} jobs", f"time ×{jobs_x10:.1f}"))
    few_s = cycle(args.jobs, args.clusters, args.hypernodes // 10, args.seed)
    hypernodes_x10 = engine_s / few_s
    rows.append(("growth: HyperNodes ×10", f"{args.hypernodes // 10} → {args.hypernodes} HyperNodes",
                 f"time ×{hypernodes_x10:.1f}"))

    latencies = decision_latencies(100, 2_000, 1_000, args.seed)
    p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    rows.append(("decision latency", "100 clusters × 2000 HyperNodes, 1000 decisions",
                 f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"))

    gang_s = gang_decision(10_000, args.seed)
    rows.append(("one gang decision", "1 cluster × 10000 HyperNodes (32000 nodes), up to 512 pods",
                 f"{gang_s * 1000:.0f} ms (slowest)"))

    share, first_fit_share, eligible = topology_quality(4, 80, 2_000, args.seed)
    rows.append(("topology quality", f"{eligible} jobs that fit one leaf, 4 clusters × 80 HyperNodes",
                 f"engine {share:.1%} in one leaf; first fit {first_fit_share:.1%}"))

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append(("memory", "peak RSS of this process", f"{rss_mb:.0f} MB"))

    width = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, width)))
    print(json.dumps({
        "placements_per_s": round(placed / cycle_s, 1), "decision_p99_ms": round(p99, 2),
        "decision_p50_ms": round(p50, 2), "cycle_s": round(cycle_s, 3), "read_s": round(read_s, 3),
        "schedule_s": round(schedule_s, 3), "commit_s": round(commit_s, 3),
        "placements": placed, "dra_placements_per_s": round(dra_placed / dra_cycle_s, 1),
        "dra_placements": dra_placed, "dra_vs_extended": round(dra_ratio, 3), "dra_member_count_ms": round(count_s * 1000, 1), "scaling_jobs_x10": round(jobs_x10, 2), "scaling_hypernodes_x10": round(hypernodes_x10, 2),
        "gang_decision_s": round(gang_s, 3), "engine_cycle_s": round(engine_s, 3),
        "engine_cycle_starving_s": round(starving_s, 3), "one_hypernode_share": round(share, 4),
        "first_fit_one_hypernode_share": round(first_fit_share, 4), "rss_mb": round(rss_mb, 1),
        "jobs": args.jobs, "clusters": args.clusters, "hypernodes": args.hypernodes,
        "changed_cycle_s": {jobs: round(b["changed_s"], 3) for jobs, b in backlog.items()},
        "changed_cycle_ratio": round(max(b["changed_s"] for b in backlog.values())
                                     / min(b["changed_s"] for b in backlog.values()), 2),
        "freed_to_admitted_s": {jobs: round(b["freed_s"], 3) for jobs, b in backlog.items()},
        "starving_changed_cycle_s": {jobs: round(b["starving_s"], 3) for jobs, b in backlog.items()},
        "backlog_pending": {jobs: b["pending"] for jobs, b in backlog.items()},
        "scheduler_rss_mb": {jobs: round(b["rss_mb"], 1) for jobs, b in backlog.items()},
    }))


if __name__ == "__main__":
    main()
