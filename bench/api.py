"""Submit API benchmark: single-POST rate and p99, and batch throughput, over a 100,000-job backlog.

    python bench/api.py [--backlog N] [--requests N] [--clients C] [--batch B] [--backends sqlite,postgres]

Each backend gets a fresh database (an SQLite file; a throw-away PostgreSQL database on
ARCHIPELAGO_TEST_POSTGRES_URL or 127.0.0.1:5432), migrated, with one tenant, its queue and token, and a backlog of
Queued jobs inserted in bulk. `archipelago serve` then runs as its own process with the loop services
off (ARCHIPELAGO_RUN_LOOPS=false: this measures the API, not the scheduler), and C client threads
POST JobSets one by one over HTTP, then in batches of B. Then the floor (bench/floor_app.py: a FastAPI app
that only inserts each body as one row of the same database) takes the same single POSTs, and the broker's
rate is given as a ratio of the floor's: machines differ, ratios travel; so is the server process's CPU time per POST
(from /proc), which others' load on a shared machine moves far less than the rates. Prints a table, then one JSON
object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import httpx
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.engine.jobset import parse_jobset, placement_record  # noqa: E402
from broker.store.db import migrate  # noqa: E402
from broker.store.db.models import Job, Queue, Tenant, Token  # noqa: E402
from broker.store.tenancy import hash_token  # noqa: E402

ADMIN_TOKEN = "bench-admin-token"
TENANT_TOKEN = "bench-tenant-token"
HEADERS = {"Authorization": f"Bearer {TENANT_TOKEN}"}  # tenants submit; admins manage


def jobset(name: str) -> dict:
    container = {"name": "trainer", "image": "ghcr.io/example/trainer:1",
                 "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"nvidia.com/gpu": "8"}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "training"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": {"spec": {
                "parallelism": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}}]}}


@contextmanager
def database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield f"sqlite:///{directory}/bench.db"
        return
    server = make_url(os.environ.get("ARCHIPELAGO_TEST_POSTGRES_URL",
                                     "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"))
    server = server.set(drivername="postgresql+psycopg")
    name = f"archipelago_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def prepare(url: str, backlog: int) -> None:
    """Migrate; one tenant with its queue and token; `backlog` Queued jobs inserted in bulk."""
    engine = create_engine(url)
    migrate.upgrade(engine)
    now = datetime.now(timezone.utc)
    with engine.begin() as connection:
        tenant_id = connection.execute(insert(Tenant).values(name="research", namespaces=["research"], created_at=now)
                                       .returning(Tenant.id)).scalar_one()
        connection.execute(insert(Queue).values(
            name="training", tenant_id=tenant_id, weight=1.0, priority=0, nominal_quota={}, preemption_policy="Never",
            is_default=True, created_at=now))
        connection.execute(insert(Token).values(token_hash=hash_token(TENANT_TOKEN), role="tenant",
                                                tenant_id=tenant_id, created_at=now))
    engine.dispose()
    queue_backlog(url, backlog)


def queue_backlog(url: str, backlog: int) -> None:
    """`backlog` Queued jobs of the prepared tenant inserted in bulk, as submissions would store them (each JobSet
    named as its job: the dispatcher applies it under that name)."""
    engine = create_engine(url)
    now = datetime.now(timezone.utc)
    record = placement_record(parse_jobset(jobset("backlog")))  # the same for every one
    with engine.begin() as connection:
        tenant_id, queue_id = connection.execute(select(Queue.tenant_id, Queue.id)
                                                 .where(Queue.name == "training")).one()
        rows = [{"tenant_id": tenant_id, "queue_id": queue_id, "name": f"backlog-{i}", "namespace": "research",
                 "manifest": jobset(f"backlog-{i}"), "placement_spec": record, "priority_class": "normal",
                 "priority": 1000, "placement_mode": "whole", "demand": {"nvidia.com/gpu": 32000}, "state": "Queued",
                 "waiting_reasons": {}, "status": {}, "restart_count": 0, "submitted_at": now} for i in range(backlog)]
        for start in range(0, len(rows), 10_000):
            connection.execute(insert(Job), rows[start:start + 10_000])
    engine.dispose()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def broker_server(url: str, app: str = "api.app:create_app") -> Iterator[tuple[str, int]]:
    """The server's base URL and process id."""
    port = free_port()
    environment = {**os.environ, "ARCHIPELAGO_DATABASE_URL": url, "ARCHIPELAGO_ADMIN_TOKEN": ADMIN_TOKEN,
                   "ARCHIPELAGO_SECRET_KEY": Fernet.generate_key().decode(), "ARCHIPELAGO_RUN_LOOPS": "false"}
    process = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", app,
                                "--port", str(port), "--log-level", "warning", "--no-access-log"],
                               cwd=ROOT, env=environment)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the broker did not start")
            time.sleep(0.1)
        yield base, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def post_concurrently(base: str, bodies: list, clients: int) -> tuple[float, list[float]]:
    """Send every body once, spread over `clients` threads, each on one keep-alive connection; return the
    wall time and per-request latencies. The stdlib client keeps the load generator's share of the two
    cores small (httpx costs about 1 ms of CPU a request, the broker's own work about 2)."""
    latencies: list[float] = []
    lock = threading.Lock()
    chunks = [bodies[i::clients] for i in range(clients)]
    address = urlsplit(base)
    headers = {**HEADERS, "Content-Type": "application/json"}

    def worker(chunk: list) -> None:
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        mine = []
        for body in chunk:
            payload = json.dumps(body).encode()
            started = time.perf_counter()
            connection.request("POST", "/api/v1/jobs", body=payload, headers=headers)
            answer = connection.getresponse()
            text = answer.read()
            mine.append(time.perf_counter() - started)
            if answer.status != 201:
                raise SystemExit(f"submission failed: {answer.status} {text[:300]!r}")
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(chunk,)) for chunk in chunks]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies


LISTINGS = {  # what an operator's and a tenant's pages ask for; Running matches no job of the backlog
    "tenant": ("/api/v1/jobs?limit=50", HEADERS),
    "tenant_deep": ("/api/v1/jobs?limit=50&cursor={middle}", HEADERS),
    "tenant_running": ("/api/v1/jobs?limit=50&state=Running", HEADERS),
    "admin_queued": ("/api/v1/jobs?limit=50&state=Queued", {"Authorization": f"Bearer {ADMIN_TOKEN}"}),
}


def list_latencies(base: str, middle: int, rounds: int = 100) -> dict[str, float]:
    """p99 in ms of each listing, asked `rounds` times in turn by one client on one connection."""
    address = urlsplit(base)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    latencies: dict[str, list[float]] = {name: [] for name in LISTINGS}
    for _ in range(rounds):
        for name, (path, headers) in LISTINGS.items():
            started = time.perf_counter()
            connection.request("GET", path.format(middle=middle), headers=headers)
            answer = connection.getresponse()
            answer.read()
            latencies[name].append(time.perf_counter() - started)
            if answer.status != 200:
                raise SystemExit(f"listing {path} failed: {answer.status}")
    connection.close()
    return {f"list_{name}_p99_ms": round(p99(values) * 1000, 1) for name, values in latencies.items()}


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else values[0]


def measure(backend: str, backlog: int, requests: int, clients: int, batch: int) -> dict:
    with database(backend) as url:
        prepare(url, backlog)
        with broker_server(url) as (base, pid):
            post_concurrently(base, [jobset(f"warmup-{i}") for i in range(50)], clients)
            cpu = cpu_seconds(pid)
            wall, latencies = post_concurrently(base, [jobset(f"single-{i}") for i in range(requests)], clients)
            cpu = cpu_seconds(pid) - cpu
            batches = [[jobset(f"batch-{b}-{i}") for i in range(batch)] for b in range(max(4, clients))]
            batch_wall, _ = post_concurrently(base, batches, min(clients, 2))
            listings = list_latencies(base, middle=backlog // 2)
        with broker_server(url, "bench.floor_app:create_app") as (base, pid):
            post_concurrently(base, [jobset(f"warmup-{i}") for i in range(50)], clients)
            floor_cpu = cpu_seconds(pid)
            floor_wall, _ = post_concurrently(base, [jobset(f"floor-{i}") for i in range(requests)], clients)
            floor_cpu = cpu_seconds(pid) - floor_cpu
    return {"backend": backend, "single_per_s": round(requests / wall, 1),
            "floor_per_s": round(requests / floor_wall, 1), "single_of_floor": round(floor_wall / wall, 2),
            "single_cpu_ms": round(cpu / requests * 1000, 2), "floor_cpu_ms": round(floor_cpu / requests * 1000, 2),
            "floor_of_single_cpu": round(floor_cpu / cpu, 2),
            "single_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "single_p99_ms": round(p99(latencies) * 1000, 1),
            "batch_jobsets_per_s": round(len(batches) * batch / batch_wall, 1), **listings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    results = [measure(b, args.backlog, args.requests, args.clients, args.batch) for b in args.backends.split(",")]
    print(f"{'backend':<10} {'single/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'floor/s':>8} {'of floor':>8} "
          f"{'CPU ms':>7} {'floor CPU ms':>12} {'batch JobSets/s':>16}")
    for r in results:
        print(f"{r['backend']:<10} {r['single_per_s']:>9} {r['single_p50_ms']:>8} {r['single_p99_ms']:>8} "
              f"{r['floor_per_s']:>8} {r['single_of_floor']:>8} {r['single_cpu_ms']:>7} {r['floor_cpu_ms']:>12} "
              f"{r['batch_jobsets_per_s']:>16}")
    print(f"\nGET /jobs?limit=50, p99 ms over the backlog: {', '.join(LISTINGS)}")
    for r in results:
        print(f"{r['backend']:<10} " + " ".join(f"{r[f'list_{name}_p99_ms']:>8}" for name in LISTINGS))
    figures = {"backlog": args.backlog, "clients": args.clients, "batch": args.batch}
    for r in results:
        figures.update({f"{r['backend']}_{k}": v for k, v in r.items() if k != "backend"})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
