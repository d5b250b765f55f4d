"""The API of the leader process while it schedules a backlog: listing and single-POST latency.

A figure of bench/placement.py's (#14), in a file of its own: it runs a broker and a simulator as processes.

    python bench/leader_api.py [--members 40] [--nodes 200] [--backlog 100000] [--rate 10] [--steady 60]
                               [--backend sqlite|postgres] [--workers N]

`archipelago serve` on SQLite (the API and every loop service in one process, loop intervals at their defaults;
with `--backend postgres --workers N`, the loops in the replica's parent process and the API in N workers of
its own, as the deploy files run it) against members served by `python -m clusters.sim` (speed 0: what runs keeps running), each registered through the
API. The broker is stopped, a backlog of Queued JobSets (4 nodes each) inserted in bulk, and the broker started
again: a leader taking over a backlog. While it schedules it (its first full cycle, then the incremental cycles
after it), this process sends `GET /api/v1/jobs?limit=50` and single POSTs, each at --rate a second, one at a time,
and prints their latency during the first cycle and over --steady seconds after it (cycles counted from the
broker's /metrics, asked once a second). Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from cryptography.fernet import Fernet
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402

from bench.api import HEADERS, database, jobset, prepare, queue_backlog  # noqa: E402
from bench.placement import percentile  # noqa: E402
from bench.propagation import start_simulator  # noqa: E402
from broker.process.testing import DEFAULT_LOOPS, Broker, free_port  # noqa: E402

TARGET_MS = 100


def paced(base: str, method: str, path: str, body: Callable[[int], bytes | None], rate: float,
          stop: threading.Event) -> list[tuple[float, float]]:
    """(sent at, seconds) of one request every 1/rate seconds, one at a time on one keep-alive connection, until
    `stop`: a slow answer delays the next one, it does not pile them up."""
    address = urlsplit(base)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
    headers = {**HEADERS, "Content-Type": "application/json"}
    samples: list[tuple[float, float]] = []
    due = time.monotonic()
    while not stop.wait(max(0.0, due - time.monotonic())):
        sent = time.monotonic()
        connection.request(method, path, body=body(len(samples)), headers=headers)
        answer = connection.getresponse()
        text = answer.read()
        samples.append((sent, time.monotonic() - sent))
        if answer.status not in (200, 201):
            raise SystemExit(f"{method} {path}: {answer.status} {text[:300]!r}")
        due = max(due + 1 / rate, time.monotonic())
    connection.close()
    return samples


def metric(broker: Broker, family_name: str, loops_url: str | None = None) -> list:
    """The samples of one metric family on the broker's /metrics (the loops' own port's, with `--workers`)."""
    text = broker.api.get(f"{loops_url}/metrics" if loops_url else "/metrics", timeout=60).text
    return [sample for family in text_string_to_metric_families(text) if family.name == family_name
            for sample in family.samples]


def cycles_done(broker: Broker, loops_url: str | None) -> int:
    return int(sum(s.value for s in metric(broker, "archipelago_scheduler_cycle_seconds", loops_url)
                   if s.name.endswith("_count")))


def measure(members: int, nodes: int, backlog: int, rate: float, steady: float, first_cycle_within: float,
            backend: str = "sqlite", workers: int = 1) -> dict:
    """The figures; if no cycle ends within `first_cycle_within` seconds, those of the attempt, and no steady state
    (a cycle whose pass fails, fenced for one, starts again from scratch: `scheduler_passes_failed`)."""
    with tempfile.TemporaryDirectory() as directory, database(backend) as url:
        work = Path(directory)
        names = [f"m{i:03d}" for i in range(members)]
        simulator = start_simulator(work, names, nodes)
        prepare(url, backlog=0)
        env = {**DEFAULT_LOOPS, "ARCHIPELAGO_LOG_LEVEL": "WARNING"}
        loops_url = None
        if workers > 1:  # the loops' figures are on a port of their own
            env["ARCHIPELAGO_LOOPS_METRICS_PORT"] = str(free_port())
            loops_url = f"http://127.0.0.1:{env['ARCHIPELAGO_LOOPS_METRICS_PORT']}"
        broker = Broker(work, database_url=url, secret_key=Fernet.generate_key().decode(), env=env,
                        args=("--workers", str(workers)) if workers > 1 else ())
        try:
            broker.start()
            for name in names:
                answer = broker.api.post("/api/v1/clusters", json={
                    "name": name, "kubeconfig": (work / f"{name}.kubeconfig").read_text()}, timeout=120)
                assert answer.status_code == 201, f"registering {name}: {answer.text}\n{broker.log()}"
            broker.process.terminate()  # stopped as a deployment stops it; the api client stays open
            broker.process.wait(60)
            queue_backlog(url, backlog)
            broker.start()
            started = time.monotonic()
            stop, samples = threading.Event(), {}
            loads = {"list": ("GET", "/api/v1/jobs?limit=50", lambda i: None),
                     "post": ("POST", "/api/v1/jobs", lambda i: json.dumps(jobset(f"probe-{i}")).encode())}

            def load(kind: str) -> None:
                samples[kind] = paced(broker.url, *loads[kind], rate, stop)

            threads = [threading.Thread(target=load, args=(kind,)) for kind in loads]
            for thread in threads:
                thread.start()
            while not (cycles := cycles_done(broker, loops_url)) and time.monotonic() - started < first_cycle_within:
                time.sleep(1)
            first_cycle_end = time.monotonic() if cycles else None
            if cycles:
                time.sleep(steady)
                cycles = cycles_done(broker, loops_url)
            stop.set()
            for thread in threads:
                thread.join()
            states = {s.labels["state"]: int(s.value) for s in metric(broker, "archipelago_jobs", loops_url) if s.value}
            failed = (work / "broker.log").read_text().count("scheduler: pass failed")
        finally:
            broker.stop()
            simulator.terminate()
            simulator.wait(30)

    figures = {"backend": backend, "api_workers": workers, "members": members, "nodes_per_member": nodes,
               "backlog": backlog, "rate_per_s": rate,
               "first_cycle_s": round(first_cycle_end - started, 1) if cycles else None, "steady_s": steady,
               "cycles": cycles, "scheduler_passes_failed": failed, "jobs_by_state": states}
    for kind in loads:
        for phase, during in (("first_cycle", lambda sent: not cycles or sent < first_cycle_end),
                              ("steady", lambda sent: cycles and sent >= first_cycle_end)):
            latencies = [seconds * 1000 for sent, seconds in samples[kind] if during(sent)]
            if not latencies:
                continue
            figures.update({f"{kind}_{phase}_requests": len(latencies),
                            **{f"{kind}_{phase}_{name}_ms": round(percentile(latencies, q), 1)
                               for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=200, help="nodes per member")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=10.0, help="listings a second, and POSTs a second")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds measured after the first full cycle")
    parser.add_argument("--first-cycle-within", type=float, default=900.0,
                        help="seconds given to the first full cycle to end")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workers", type=int, default=1, help="API worker processes (PostgreSQL only)")
    args = parser.parse_args()
    f = measure(args.members, args.nodes, args.backlog, args.rate, args.steady, args.first_cycle_within,
                args.backend, args.workers)
    rows = [("database, API workers", f"{f['backend']}, {f['api_workers']}", ""),
            ("members × nodes each", f"{f['members']} × {f['nodes_per_member']}", ""),
            ("backlog of 4-node JobSets", str(f["backlog"]), ""),
            ("jobs by state at the end", ", ".join(f"{n} {state}" for state, n in f["jobs_by_state"].items()), ""),
            ("first full cycle, from the broker's start",
             f"{f['first_cycle_s']} s" if f["cycles"] else f"none in {args.first_cycle_within:g} s", ""),
            (f"cycles run: the first, then over {f['steady_s']:g} s", str(f["cycles"]), ""),
            ("scheduler passes failed (fenced: the cycle is lost)", str(f["scheduler_passes_failed"]), "0")]
    for kind, label in (("list", "GET /jobs?limit=50"), ("post", "one POST")):
        for phase in ("first_cycle", "steady") if f["cycles"] else ("first_cycle",):
            rows.append((f"{label}, {phase.replace('_', ' ')}: p50 / p99 / max ({f[f'{kind}_{phase}_requests']})",
                         " / ".join(f"{f[f'{kind}_{phase}_{name}_ms']:.0f}" for name in ("p50", "p99", "max")) + " ms",
                         f"p99 ≤ {TARGET_MS} ms"))
    print_table(rows, f)


if __name__ == "__main__":
    main()
