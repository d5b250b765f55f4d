"""Replicated broker on PostgreSQL: takeover after the leader's SIGKILL, submit-to-admitted through an API-only
replica, single-POST rate with `serve --workers 2` vs 1.

    python bench/ha.py [--kills 5] [--submissions 100] [--requests 1000] [--clients 8] [--rounds 3]

1. Three `archipelago serve` replicas (default lease: 10 s, renewed every 2 s) on a throw-away database
   (ARCHIPELAGO_TEST_POSTGRES_URL or 127.0.0.1:5432). The leader (the holder in the `leases` row) is SIGKILLed
   `--kills` times and started again; takeover is the time from the kill to another replica holding the lease.
2. A fourth replica serves the API only (ARCHIPELAGO_RUN_LOOPS=false); JobSets are submitted through it one at a
   time, 50 ms apart, to the simulator's members; latency is the job's admitted_at - submitted_at (the
   leader's scheduler is woken by NOTIFY; its interval stays the default 2 s).
3. `serve --workers 1`, then `--workers 2`, each on a fresh database with the loops off, take the same single
   POSTs from `--clients` threads (bench/api.py's load generator), in turn for `--rounds` rounds; the ratio of
   each one's best rate (on a shared 2-core host the first rounds run while the phases before wind down, and a
   single pair swung from 1.25x to 1.76x with what else ran).
Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import create_engine, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402

from bench.api import database, jobset as api_jobset, p99, post_concurrently, prepare  # noqa: E402
from broker.process.testing import SCENARIO, TENANTS, Broker, jobset, leader_pid, wait_for  # noqa: E402
from broker.store.db.models import Job  # noqa: E402
from clusters.sim.testing import running_simulator  # noqa: E402

POLL = 0.02


def takeovers(engine, replicas: list[Broker], kills: int) -> list[float]:
    """Seconds from each SIGKILL of the leader to another replica holding the lease."""
    seconds = []
    for _ in range(kills):
        wait_for(lambda: leader_pid(engine) is not None and all(r.ready() for r in replicas), "three replicas",
                 deadline=60)
        victim = next(r for r in replicas if r.process.pid == leader_pid(engine))
        killed = time.monotonic()
        victim.kill()
        while leader_pid(engine) in (None, victim.process.pid):
            time.sleep(POLL)
        seconds.append(time.monotonic() - killed)
        victim.start(wait=False)
    return seconds


def admissions(engine, api_only: Broker, sim, submissions: int) -> list[float]:
    """Seconds from submission (through the API-only replica) to admission, per job."""
    tenant, queue = TENANTS[0]
    api_only.api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).raise_for_status()
    api_only.api.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).raise_for_status()
    for name in sim.cluster_names:
        api_only.api.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name)}
                          ).raise_for_status()
    one_gpu = (("workers", 1, 1, 1),)
    for n in range(submissions):
        api_only.api.post("/api/v1/jobs", params={"tenant": tenant}, json=jobset(
            f"ha-{n}", parts=one_gpu, annotations={"sim.archipelago.io/duration": "1h"})).raise_for_status()
        time.sleep(0.05)

    def times():
        with engine.connect() as connection:
            return connection.execute(select(Job.submitted_at, Job.admitted_at)).all()

    wait_for(lambda: all(admitted for _, admitted in times()), "every job to be admitted", deadline=60)
    return [(admitted - submitted).total_seconds() for submitted, admitted in times()]


def post_rate(workers: int, requests: int, clients: int) -> float:
    """Single POSTs a second into `serve --workers N` (loops off: the API alone), on a fresh database."""
    with database("postgres") as url, tempfile.TemporaryDirectory() as directory:
        prepare(url, backlog=0)
        server = Broker(Path(directory), database_url=url, secret_key=Fernet.generate_key().decode(),
                        env={"ARCHIPELAGO_RUN_LOOPS": "false", "ARCHIPELAGO_LOG_LEVEL": "WARNING"},
                        name=f"workers-{workers}", args=("--workers", str(workers)))
        server.start()
        try:
            post_concurrently(server.url, [api_jobset(f"warmup-{i}") for i in range(50)], clients)
            wall, _ = post_concurrently(server.url, [api_jobset(f"single-{i}") for i in range(requests)], clients)
        finally:
            server.stop()
    return requests / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with database("postgres") as url, tempfile.TemporaryDirectory() as directory, \
            running_simulator(SCENARIO, speed=1) as sim:
        prepare(url, backlog=0)
        engine = create_engine(url)
        secret = Fernet.generate_key().decode()
        quiet = {"ARCHIPELAGO_LOG_LEVEL": "WARNING", "ARCHIPELAGO_SCHEDULER_INTERVAL": "2"}
        replicas = [Broker(Path(directory), database_url=url, secret_key=secret, env=quiet, name=f"replica-{i}")
                    for i in range(3)]
        api_only = Broker(Path(directory), database_url=url, secret_key=secret, name="api-only",
                          env={**quiet, "ARCHIPELAGO_RUN_LOOPS": "false"})
        try:
            for server in (*replicas, api_only):
                server.start(wait=False)
            takeover = takeovers(engine, replicas, args.kills)
            wait_for(api_only.ready, "the API-only replica", deadline=60)
            latency = admissions(engine, api_only, sim, args.submissions)
        finally:
            for server in (*replicas, api_only):
                server.stop()
            engine.dispose()
    rates: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for workers, measured in rates.items():
            measured.append(post_rate(workers, args.requests, args.clients))
    one, two = max(rates[1]), max(rates[2])

    figures = {"kills": args.kills, "takeover_p50_s": round(statistics.median(takeover), 2),
               "takeover_max_s": round(max(takeover), 2), "submissions": args.submissions,
               "admitted_p50_ms": round(statistics.median(latency) * 1000, 1),
               "admitted_p99_ms": round(p99(latency) * 1000, 1), "single_post_per_s_workers_1": round(one, 1),
               "single_post_per_s_workers_2": round(two, 1), "workers_2_vs_1": round(two / one, 2),
               "rounds": {f"workers_{workers}": [round(rate, 1) for rate in measured]
                          for workers, measured in rates.items()}}
    print_table([
        ("takeover after the leader's SIGKILL, p50", f"{figures['takeover_p50_s']} s", "<= 15 s"),
        ("takeover, max", f"{figures['takeover_max_s']} s", "<= 15 s"),
        ("submit to admitted via an API-only replica, p50", f"{figures['admitted_p50_ms']} ms", ""),
        ("submit to admitted, p99", f"{figures['admitted_p99_ms']} ms", "<= 1000 ms"),
        ("single POSTs/s, --workers 1, best of the rounds", str(figures["single_post_per_s_workers_1"]), ""),
        ("single POSTs/s, --workers 2, best of the rounds", str(figures["single_post_per_s_workers_2"]), ""),
        ("--workers 2 vs 1", f"{figures['workers_2_vs_1']}x", ">= 1.6x"),
    ], figures)


if __name__ == "__main__":
    main()
