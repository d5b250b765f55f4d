"""How right the forecast is, and what backfill gives: a replay of a job trace through the scheduler's engine.

Four clusters of 56 GPU nodes (bench/placement.py's layout), and a trace of jobs of the placement bench's shapes
arriving at random (30 % more work than the fleet holds while they arrive), each with a true runtime (log-normal, median 1 h). A job's
declared runtime (`archipelago.io/expected-runtime`) is its true one times 0.8-1.5; in the "mixed" trace a
third declare nothing (their runtime is the broker's default, 1 h). The replay moves from event to event (an arrival,
an end): at each, `schedule` over the jobs waiting, as the scheduler would; the placed ones start then and end a
true runtime later. Forty times along, `forecast` is asked of every waiting job, and its answer is checked against
when the job did start: the error as a share of the wait that was left, for jobs that had just arrived (their first
tenth of the wait) and for those halfway. What the play forward itself misses: the same with runtimes declared
exactly, asked only once every job has arrived. The declared trace is replayed with backfill and without, for three
seeds (one replay is one draw of arrivals: its longest wait is noisy): the fleet's utilisation and the wait of the
jobs of 64 GPUs or more.

    .venv/bin/python bench/forecast_replay.py [--jobs 1500] [--seed 11] [--seeds 3]

The last line is one JSON object. The engine alone: members, the database and HTTP are not in it.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.placement import inventory, manifest, queues  # noqa: E402
from broker.engine.forecast import Limits, forecast  # noqa: E402
from broker.engine.jobset import parse_jobset  # noqa: E402
from broker.engine.placement import GPU, Config, PendingJob, Snapshot, schedule, shape_of  # noqa: E402

CLUSTERS, HYPERNODES = 4, 40  # 56 nodes of 8 GPUs each
DEFAULT_RUNTIME = 3600.0
LOAD = 1.3  # above capacity while jobs arrive: queues form, holds and backfill matter
SAMPLES = 40
BIG = 64_000  # milli-GPUs: the jobs whose wait backfill must not lengthen


def trace(count: int, seed: int, declared_share: float, noise: tuple[float, float] = (0.8, 1.5)
          ) -> list[tuple[float, PendingJob, float, float | None]]:
    """(arrival, job, true runtime, declared runtime or None), in arrival order."""
    rnd = random.Random(seed)
    tenants, qs = queues()
    jobs = []
    for i in range(count):
        queue = rnd.choice(qs)
        spec = parse_jobset(manifest(f"job-{i}", rnd))
        runtime = min(12 * 3600.0, rnd.lognormvariate(math.log(3600.0), 0.8))
        declared = runtime * rnd.uniform(*noise) if rnd.random() < declared_share else None
        jobs.append((PendingJob(str(i + 1), queue.tenant, queue.name, 0, 0.0, spec, shape=shape_of(spec)),
                     runtime, declared))
    gpus = sum(job.spec.requests.get(GPU, 0) / 1000 * runtime for job, runtime, _ in jobs)
    capacity = CLUSTERS * 56 * 8
    gap = gpus / (capacity * LOAD) / count  # seconds between arrivals for the load
    arrival, out = 0.0, []
    for job, runtime, declared in jobs:
        arrival += rnd.expovariate(1 / gap)
        out.append((arrival, replace(job, submitted_at=arrival), runtime, declared))
    return out


def replay(jobs, backfill: bool, sample: bool, after_arrivals: bool = False) -> dict:
    """`after_arrivals`: the forecast is asked only once every job has arrived (then at every fifth end): what the
    play forward itself misses, with no job arriving later to go first."""
    tenants, qs = queues()
    clusters = inventory(CLUSTERS, HYPERNODES)
    built: dict = {}
    arrivals = list(jobs)
    truth = {job.id: (runtime, declared) for _, job, runtime, declared in jobs}
    waiting: dict[str, PendingJob] = {}
    running: dict[str, list] = {}  # job id -> its running placements
    ends: list[tuple[float, str]] = []
    started: dict[str, float] = {}
    sample_every = max(1, len(jobs) // SAMPLES)
    predictions: list[tuple[str, float, float]] = []  # (job, when asked, predicted start)
    used_gpu_seconds, now, forecast_s, count = 0.0, 0.0, [], 0
    while arrivals or ends:
        now = min(arrivals[0][0] if arrivals else math.inf, ends[0][0] if ends else math.inf)
        while ends and ends[0][0] <= now:
            running.pop(heapq.heappop(ends)[1])
        arrived = 0
        while arrivals and arrivals[0][0] <= now:
            _, job, runtime, declared = arrivals.pop(0)
            waiting[job.id] = replace(job, runtime=declared if backfill else None)
            arrived, count = arrived + 1, count + 1
        live = [p for parts in running.values() for p in parts]
        snapshot = Snapshot(clusters, qs, tenants, live, now, built)
        if sample and (not arrivals and waiting and len(started) % 5 == 0 if after_arrivals
                       else arrived and count % sample_every == 0):
            predictions += ask(clusters, qs, tenants, live, waiting, truth, running, now, built, forecast_s)
        result = schedule(snapshot, list(waiting.values()), Config(preemption=False))  # as the forecast plays it
        for placement in result.placements:
            job = waiting.get(placement.job_id)
            if job is None:
                continue
            runtime, declared = truth[job.id]
            expected = now + declared if declared is not None and backfill else None
            running.setdefault(job.id, []).append(placement.as_running(
                tenant=job.tenant, queue=job.queue, priority=0, started_at=now, expected_end=expected))
        for job_id in {p.job_id for p in result.placements}:
            job = waiting.pop(job_id)
            started[job_id] = now
            runtime = truth[job_id][0]
            heapq.heappush(ends, (now + runtime, job_id))
            used_gpu_seconds += job.spec.requests.get(GPU, 0) / 1000 * runtime
    makespan = now
    submitted = {job.id: arrival for arrival, job, _, _ in jobs}
    big = [started[j.id] - submitted[j.id] for _, j, _, _ in jobs
           if j.spec.requests.get(GPU, 0) >= BIG and j.id in started]
    overran = sum(1 for job_id, (runtime, declared) in truth.items() if declared is not None and runtime > declared)
    return {"utilisation": used_gpu_seconds / (CLUSTERS * 56 * 8 * makespan), "largest_jobs_longest_wait_s": max(big),
            "largest_jobs_mean_wait_s": statistics.mean(big), "overran_their_declaration": overran,
            "never_started": len(waiting),  # no cluster could take them (a hard topology bound they exceed)
            "mean_wait_s": statistics.mean(started[j] - submitted[j] for j in started),
            "errors": errors(predictions, started, submitted) if sample else None,
            "forecast_s_p50": statistics.median(forecast_s) if forecast_s else None}


def ask(clusters, qs, tenants, live, waiting, truth, running, now, built, timings) -> list[tuple[str, float, float]]:
    """The forecast of every waiting job now, as the broker would make it: running jobs end at their start plus
    their declared runtime, else the default; waiting ones run their declared runtime, else the default."""
    def said(job_id: str) -> float:
        declared = truth[job_id][1]
        return DEFAULT_RUNTIME if declared is None else declared
    end_of = {job_id: parts[0].started_at + said(job_id) for job_id, parts in running.items()}
    snapshot = Snapshot(clusters, qs, tenants, live, now, built)
    began = time.perf_counter()
    expected = forecast(snapshot, list(waiting.values()), live, {j: max(e, now + 60) for j, e in end_of.items()},
                        {job_id: said(job_id) for job_id in waiting}, limits=Limits(resolution_s=60.0))
    timings.append(time.perf_counter() - began)
    return [(job_id, now, e.start) for job_id, e in expected.items() if e.start is not None]


def errors(predictions, started, submitted) -> dict:
    """|predicted - actual| as a share of the wait left, for jobs asked early in their wait and halfway through."""
    early, halfway, every = [], [], []
    for job_id, asked, predicted in predictions:
        if job_id not in started:
            continue
        wait = started[job_id] - submitted[job_id]
        left = started[job_id] - asked
        if wait < 600 or left <= 0:
            continue  # a job that waited under 10 min: any forecast is right enough
        share = abs(predicted - started[job_id]) / left
        into = (asked - submitted[job_id]) / wait
        every.append(share)
        (early if into <= 0.1 else halfway if 0.4 <= into <= 0.6 else []).append(share)

    def quantiles(values):
        if not values:
            return None
        values = sorted(values)
        return {"median": round(statistics.median(values), 3),
                "p90": round(values[min(len(values) - 1, int(0.9 * len(values)))], 3), "n": len(values)}
    return {"at_submission": quantiles(early), "halfway": quantiles(halfway), "all": quantiles(every)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--seeds", type=int, default=3, help="traces replayed with backfill and without")
    args = parser.parse_args()
    declared = trace(args.jobs, args.seed, 1.0)
    mixed = trace(args.jobs, args.seed, 2 / 3)
    exact = trace(args.jobs, args.seed, 1.0, noise=(1.0, 1.0))
    results = {"exact_after_arrivals": replay(exact, backfill=True, sample=True, after_arrivals=True),
               "declared": replay(declared, backfill=True, sample=True),
               "declared_without_backfill": replay(declared, backfill=False, sample=False),
               "mixed": replay(mixed, backfill=True, sample=True)}
    for seed in range(args.seed + 1, args.seed + args.seeds):
        other = trace(args.jobs, seed, 1.0)
        results[f"declared_seed_{seed}"] = replay(other, backfill=True, sample=False)
        results[f"declared_seed_{seed}_without_backfill"] = replay(other, backfill=False, sample=False)
    for name, r in results.items():
        e = r["errors"] or {}
        print(f"{name:28} utilisation {r['utilisation']:.1%}, 64+ GPU jobs' wait: longest "
              f"{r['largest_jobs_longest_wait_s'] / 3600:.1f} h, mean {r['largest_jobs_mean_wait_s'] / 60:.0f} min; "
              f"mean wait {r['mean_wait_s'] / 60:.0f} min"
              + (f"; start error / wait left: at submission {e['at_submission']}, halfway {e['halfway']}, "
                 f"whenever asked {e['all']}" if e else ""),
              flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
