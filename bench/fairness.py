"""Benchmark of fair share (issue #12): how close each tenant's time-averaged share of the federation comes to
its weighted fair share on a saturated trace, against a first-in-first-out baseline on the same trace.

The placement engine alone (no database, no members), on simulated time: 4 clusters × 16 nodes of 8 GPUs
(512 GPUs). Tenants of weights 1, 1, 2 and 4 (the weight-2 tenant spreads its jobs over three queues) each keep
a backlog of 8 JobSets of 1, 2 or 4 pods × 8 GPUs, 5–60 minutes each, drawn from one seeded sequence per
tenant; the weight-4 tenant arrives a quarter of the way in, to a full federation, and has opted in to
fair-share preemption (as have the others). A scheduling cycle runs every simulated minute, with the engine's
defaults (so jobs waiting over 15 minutes — most of them, in a saturated federation — hold nodes).

Fair share: the engine as configured (two-level weighted DRF, fair-share preemption). FIFO: the same jobs in
one queue, decided by submission time. For each tenant, its time-averaged share of the GPUs in use is compared
with its time-averaged fair share (its weight among the tenants present); the figure is the largest
difference, in percentage points (target ≤ 5). Also: GPU utilisation against FIFO's (target ≥ 95% of it) and
preemptions per simulated hour. Prints a table; the last line is one JSON object.

    python bench/fairness.py [--hours 8] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from table import print_table  # noqa: E402

from broker.engine.jobset import JobSpec, parse_jobset  # noqa: E402
from broker.engine.placement import (GPU, Cluster, HyperNode, Node, PendingJob, Queue, RunningPlacement, Snapshot,
                                     Tenant, schedule)  # noqa: E402
from broker.engine.placement.fairness import tenant_fair_shares  # noqa: E402

GiB = 2**30 * 1000
STEP_S = 60.0
BACKLOG = 8
# name, weight, queues, arrives at (share of the horizon)
TENANTS = (("ada", 1.0, 1, 0.0), ("bob", 1.0, 1, 0.0), ("cyd", 2.0, 3, 0.0), ("dee", 4.0, 1, 0.25))


def clusters() -> list[Cluster]:
    result = []
    for c in range(4):
        nodes, trees = [], []
        for leaf in range(2):
            members = tuple(f"c{c}-l{leaf}-n{i}" for i in range(8))
            trees.append(HyperNode(f"c{c}-l{leaf}", 1, f"c{c}-spine", (), members))
            nodes += [Node(n, {"cpu": 96_000, "memory": 1024 * GiB, GPU: 8000}) for n in members]
        trees.append(HyperNode(f"c{c}-spine", 2, None, (f"c{c}-l0", f"c{c}-l1")))
        result.append(Cluster(f"c{c}", "Ready", {}, (), True, tuple(nodes), tuple(trees)))
    return result


def spec(pods: int) -> JobSpec:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                                                             "limits": {GPU: "8"}}}
    return parse_jobset({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": f"j{pods}"},
                         "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                             "parallelism": pods, "template": {"spec": {"containers": [container]}}}}}]}})


@dataclass
class Trace:
    """Each tenant's jobs in the order it submits them: (pods, minutes), the same for both policies."""

    seed: int

    def jobs(self, tenant: str):
        rnd = random.Random(f"{self.seed}-{tenant}")
        while True:
            yield rnd.choice([1, 2, 2, 4]), rnd.uniform(5, 60)


@dataclass
class Result:
    gpu_seconds: dict[str, float]
    fair_seconds: dict[str, float]
    used_seconds: float
    preemptions: int
    elapsed_s: float


def simulate(trace: Trace, hours: float, fifo: bool) -> Result:
    horizon = hours * 3600
    specs = {pods: spec(pods) for pods in (1, 2, 4)}
    capacity = sum(n.allocatable[GPU] for c in clusters() for n in c.nodes) // 1000
    tenants = [Tenant(name, weight, "LessThanOrEqualToFinalShare") for name, weight, _, _ in TENANTS]
    queues = ([Queue("fifo", "everyone")] if fifo else
              [Queue(f"{name}-{k}", name) for name, _, count, _ in TENANTS for k in range(count)])
    streams = {name: trace.jobs(name) for name, _, _, _ in TENANTS}
    pending: dict[str, tuple[PendingJob, float, str]] = {}  # id -> (job, minutes, tenant)
    running: dict[str, tuple[RunningPlacement, float, PendingJob, float, str]] = {}  # id -> (.., ends, job, minutes, tenant)
    gpu_seconds = {name: 0.0 for name, _, _, _ in TENANTS}
    fair_seconds = dict(gpu_seconds)
    used_seconds, preemptions, counter = 0.0, 0, 0
    started = time.perf_counter()
    now = 0.0
    while now < horizon:
        for job_id in [j for j, (_, ends, _, _, _) in running.items() if ends <= now]:
            del running[job_id]
        present = [name for name, _, _, arrives in TENANTS if now >= arrives * horizon]
        for name, _, count, _ in TENANTS:
            if name not in present:
                continue
            mine = sum(1 for _, _, tenant in pending.values() if tenant == name)
            for _ in range(BACKLOG - mine):
                pods, minutes = next(streams[name])
                counter += 1
                queue = "fifo" if fifo else f"{name}-{counter % count}"
                job = PendingJob(f"{counter:07d}", "everyone" if fifo else name, queue, 0, now, specs[pods])
                pending[job.id] = (job, minutes, name)
        snapshot = Snapshot(clusters(), queues, tenants, [r for r, _, _, _, _ in running.values()], now)
        result = schedule(snapshot, [job for job, _, _ in pending.values()])
        for victim in {p.job_id for p in result.preemptions}:
            _, _, job, minutes, tenant = running.pop(victim)
            pending[victim] = (job, minutes, tenant)  # requeued, to run again from the start
            preemptions += 1
        for placement in result.placements:
            job, minutes, tenant = pending.pop(placement.job_id)
            record = placement.as_running(tenant=job.tenant, queue=job.queue, priority=0, started_at=now)
            running[job.id] = (record, now + minutes * 60, job, minutes, tenant)
        for record, _, _, _, tenant in running.values():
            gpus = sum(u.get(GPU, 0) for u in record.node_usage.values()) / 1000
            gpu_seconds[tenant] += gpus * STEP_S
            used_seconds += gpus * STEP_S
        weights = {name: weight for name, weight, _, _ in TENANTS}
        for tenant, share in tenant_fair_shares(weights, present).items():
            fair_seconds[tenant] += share * STEP_S
        now += STEP_S
    return Result(gpu_seconds, {t: s / horizon for t, s in fair_seconds.items()}, used_seconds / (capacity * horizon),
                  preemptions, time.perf_counter() - started)


def deviations(result: Result) -> dict[str, float]:
    """Per tenant: time-averaged share of the GPUs in use minus time-averaged fair share, in percentage points."""
    used = sum(result.gpu_seconds.values()) or 1.0
    return {t: 100 * (result.gpu_seconds[t] / used - result.fair_seconds[t]) for t in result.gpu_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    trace = Trace(args.seed)
    fair, fifo = simulate(trace, args.hours, fifo=False), simulate(trace, args.hours, fifo=True)
    fair_dev, fifo_dev = deviations(fair), deviations(fifo)
    worst, fifo_worst = max(map(abs, fair_dev.values())), max(map(abs, fifo_dev.values()))
    ratio = fair.used_seconds / fifo.used_seconds
    per_hour = fair.preemptions / args.hours
    rows = [(f"share − fair share, {t} (weight {w:g})", f"{fair_dev[t]:+.1f} pp (FIFO {fifo_dev[t]:+.1f} pp)", "")
            for t, w, _, _ in TENANTS]
    rows += [("max deviation from weighted fair share", f"{worst:.1f} pp (FIFO {fifo_worst:.1f} pp)", "≤ 5 pp"),
             ("GPU utilisation", f"{fair.used_seconds:.1%} (FIFO {fifo.used_seconds:.1%}; ×{ratio:.3f})",
              "≥ 95% of FIFO's"),
             ("preemptions per simulated hour", f"{per_hour:.1f}", "—"),
             ("run time (fair share / FIFO)", f"{fair.elapsed_s:.1f} s / {fifo.elapsed_s:.1f} s", "—")]
    print_table(rows, {"hours": args.hours, "tenants": len(TENANTS), "max_deviation_pp": round(worst, 2),
                       "fifo_max_deviation_pp": round(fifo_worst, 2), "utilisation": round(fair.used_seconds, 4),
                       "fifo_utilisation": round(fifo.used_seconds, 4), "utilisation_vs_fifo": round(ratio, 4),
                       "preemptions_per_hour": round(per_hour, 2)})


if __name__ == "__main__":
    main()
