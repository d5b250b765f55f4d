"""When will it start: the forecast's time, against a scheduling cycle's, on a saturated federation.

50 clusters × 1,000 HyperNodes (bench/placement.py's), filled by a first cycle whose placements then run for
random times (10 min to 8 h); 10,000 and 100,000 jobs wait behind them. The forecast plays the fleet forward for
the first ARCHIPELAGO_FORECAST_WINDOW of them (each queue's head first) — every step a cycle of the scheduler's own —
and is timed against one cycle over the whole backlog (the target: at most 20 % of it at 100,000 pending).

    .venv/bin/python bench/forecast.py [--jobs 10000,100000]

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.placement import FRESH, snapshot, workload  # noqa: E402
from broker.engine.forecast import Limits, forecast  # noqa: E402
from broker.engine.placement import schedule, shape_of  # noqa: E402
from broker.process.settings import Settings  # noqa: E402

CLUSTERS, HYPERNODES = 50, 1000


def federation(jobs: int, seed: int):
    """A snapshot filled by a first cycle, the running work's ends, and the jobs left waiting with runtimes."""
    rnd = random.Random(seed)
    filled = snapshot(CLUSTERS, HYPERNODES)
    pending = workload(jobs, seed)
    first = schedule(filled, pending)
    placed = {p.job_id for p in first.placements}
    by_id = {j.id: j for j in pending}
    running = [p.as_running(tenant=by_id[p.job_id].tenant, queue=by_id[p.job_id].queue,
                            priority=by_id[p.job_id].priority, started_at=FRESH) for p in first.placements]
    ends = {job_id: FRESH + rnd.uniform(600, 8 * 3600) for job_id in placed}
    waiting = [replace(j, shape=shape_of(j.spec)) for j in pending if j.id not in placed]  # as the scheduler reads them
    runtimes = {j.id: rnd.uniform(600, 8 * 3600) for j in waiting}
    return running, ends, waiting, runtimes


def measure(jobs: int, seed: int) -> dict:
    running, ends, waiting, runtimes = federation(jobs, seed)

    def fresh():
        """The filled federation, as a scheduler's read would build it."""
        return snapshot(CLUSTERS, HYPERNODES, running=running)

    s = fresh()
    began = time.perf_counter()
    schedule(s, waiting)
    cycle_s = time.perf_counter() - began
    s = fresh()
    began = time.perf_counter()
    expected = forecast(s, waiting, running, ends, runtimes)
    forecast_s = time.perf_counter() - began
    started = [e for e in expected.values() if e.start is not None]
    s = fresh()
    budget = Settings(_env_file=None).forecast_budget
    began = time.perf_counter()
    within = forecast(s, waiting, running, ends, runtimes, out_of_time=lambda: time.perf_counter() > began + budget)
    budgeted_s = time.perf_counter() - began
    return {"pending": len(waiting), "running_jobs": len(ends), "cycle_s": round(cycle_s, 3),
            "forecast_s": round(forecast_s, 3), "forecast_share_of_cycle": round(forecast_s / cycle_s, 3),
            "forecast_jobs": len(expected), "with_a_start": len(started), "window": Limits().window,
            "budget_s": budget, "budgeted_s": round(budgeted_s, 3),
            "with_a_start_within_budget": sum(1 for e in within.values() if e.start is not None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="10000,100000")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    results = {}
    for jobs in (int(n) for n in args.jobs.split(",")):
        results[str(jobs)] = measure(jobs, args.seed)
        r = results[str(jobs)]
        print(f"{r['pending']:>7} pending: a cycle {r['cycle_s']:.2f} s, the forecast {r['forecast_s']:.2f} s "
              f"({r['forecast_share_of_cycle']:.0%}); {r['with_a_start']} of {r['forecast_jobs']} forecast jobs "
              f"start within the horizon; in its budget of {r['budget_s']:g} s ({r['budgeted_s']:.2f} s), "
              f"{r['with_a_start_within_budget']} do", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
