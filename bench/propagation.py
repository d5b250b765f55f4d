"""Benchmark of propagation and status, against one `python -m clusters.sim --tls` process (speed 0).

1. Apply: N JobSets placed by the scheduler, then the dispatcher's passes until every placement is
   Starting on its member (a namespace list, a split part's admission asked by a dry run, Applying committed,
   server-side apply, the results committed in batches as they come) — against the bare `kubernetes` client
   creating the same N JobSets on the same members directly, one after another in one thread. Reports the
   ratio. Both create suspended JobSets, so the simulated controllers' work does not weigh on either side, and
   both start connected: the bare client has created its namespace, the dispatcher has made its first pass
   (the sweep of every member a starting broker makes before any apply). Three runs: whole JobSets (their
   applies ask the member's admission themselves: no dry run), the parts of split JobSets of one template (one
   dry run answers for a member's copies), and of templates each its own (a dry run per part): the dry runs'
   cost, as extra requests per placement and on the ratio.
2. Status lag: one running JobSet on each of M members, the status loop watching all of them; a
   status change written on a member (a condition, through the member's /status API) until the
   job's row — what GET /api/v1/jobs/{id} answers — shows it. Reports p50 and p99.

Prints a table; the last line is one JSON object of the figures.

    python bench/propagation.py [--jobs 300] [--apply-clusters 4] [--members 100] [--changes 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from cryptography.fernet import Fernet
from kubernetes import client as k8s, config as k8s_config
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402

from bench.inventory import sim_requests  # noqa: E402
from broker.process.settings import Settings  # noqa: E402
from broker.services.dispatcher import DispatcherService  # noqa: E402
from broker.services.inventory import first_sync  # noqa: E402
from broker.services.members import MemberClients  # noqa: E402
from broker.services.scheduler import SchedulerService  # noqa: E402
from broker.services.status import StatusService  # noqa: E402
from broker.store.capacity import federation_capacity  # noqa: E402
from broker.store.db.models import Job, Placement, Queue, Tenant  # noqa: E402
from broker.store.db.runtime import open_database  # noqa: E402
from broker.store.inventory import register_cluster  # noqa: E402
from broker.store.jobs import submit_jobs  # noqa: E402
from broker.store.tenancy import submitter_named  # noqa: E402
from clusters.member import JOBSET_GROUP, JOBSET_VERSION, MemberClient  # noqa: E402

NODE = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}


def start_simulator(work: Path, names: list[str], nodes: int) -> subprocess.Popen:
    scenario = {"defaults": {"nodes": nodes, "node": NODE, "topology": {"leaf": 8, "spine": 2}, "duration": "1h"},
                "clusters": [{"name": name, "labels": {"member": name}} for name in names]}
    (work / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    proc = subprocess.Popen([sys.executable, "-m", "clusters.sim", "--scenario", str(work / "scenario.yaml"),
                             "--port", "0", "--kubeconfig-dir", str(work), "--tls", "--speed", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:  # kubeconfigs are written before serving
        if "admin token" in line:
            break
    deadline = time.monotonic() + 120
    while True:
        try:
            member = MemberClient.from_kubeconfig((work / f"{names[0]}.kubeconfig").read_text())
            member.version()
            member.close()
            return proc
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.1)


def manifest(name: str, *, suspend: bool = False, member: str | None = None) -> dict:
    spec = {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
        "parallelism": 1, "completions": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}}]}
    if suspend:
        spec["suspend"] = True
    annotations = {"archipelago.io/cluster-selector": f"member={member}"} if member else {}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "bench", "annotations": annotations}, "spec": spec}


class Broker:
    """A database, the registered members and the loops, in this process."""

    def __init__(self, work: Path, names: list[str], database: Path | None = None, **overrides) -> None:
        self.settings = Settings(database_url=f"sqlite:///{database or work / 'archipelago.db'}", _env_file=None,
                                 secret_key=Fernet.generate_key().decode(), **overrides)
        self.database = open_database(self.settings, upgrade=True)
        self.members = MemberClients(self.settings)
        for name in names:
            with self.database.write() as session:
                cluster, member = register_cluster(session, self.settings, name=name, labels={"member": name},
                                                   kubeconfig=(work / f"{name}.kubeconfig").read_text())
            first_sync(self.database, self.settings, cluster.id, member)
            member.close()
        with self.database.write() as session:
            tenant = Tenant(name="bench", namespaces=["bench"])
            session.add(Queue(name="bench", tenant=tenant, is_default=True))
        self.scheduler = SchedulerService(self.database, self.settings)
        self.dispatcher = DispatcherService(self.database, self.settings, self.members)

    def submit(self, manifests: list[dict]) -> None:
        with self.database.write() as session:
            tenant = submitter_named(session, session.scalar(select(Tenant.name)))
            submit_jobs(session, tenant, manifests, self.settings, federation_capacity(session), batch=True)

    def count(self, *where) -> int:
        with self.database.sessions() as session:
            return session.scalar(select(func.count()).select_from(Placement).where(*where))

    def close(self) -> None:
        self.dispatcher.stop()
        self.members.close()
        self.database.dispose()


def bench_apply(work: Path, names: list[str], jobs: int) -> dict:
    figures = bare_create(work, names, jobs)
    whole = broker_apply(work, names, jobs, "whole")
    shared = broker_apply(work, names, jobs, "parts", split=True)
    distinct = broker_apply(work, names, jobs, "distinct", split=True, distinct=True)
    bare = figures["bare_create_s"]
    return {**figures, "broker_apply_s": whole["apply_s"], "apply_ratio": round(whole["apply_s"] / bare, 2),
            "dry_runs_per_placement_whole": whole["dry_runs_per_placement"],
            "apply_ratio_parts": round(shared["apply_s"] / bare, 2),
            "dry_runs_per_placement_parts": shared["dry_runs_per_placement"],
            "apply_ratio_parts_distinct": round(distinct["apply_s"] / bare, 2),
            "dry_runs_per_placement_parts_distinct": distinct["dry_runs_per_placement"],
            "dry_run_cost_on_ratio": round(shared["apply_s"] / whole["apply_s"] - 1, 3),
            "dry_run_cost_on_ratio_distinct": round(distinct["apply_s"] / whole["apply_s"] - 1, 3)}


def bare_create(work: Path, names: list[str], jobs: int) -> dict:
    """The bare client: the same JobSets, created one after another."""
    bare = []
    for name in names:
        config = k8s.Configuration()
        k8s_config.load_kube_config(str(work / f"{name}.kubeconfig"), client_configuration=config)
        bare.append(k8s.ApiClient(config))
    for api in bare:
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": "bare"}})
    bodies = [{**manifest(f"bare-{i}", suspend=True), "metadata": {"name": f"bare-{i}", "namespace": "bare"}}
              for i in range(jobs)]
    t0 = time.perf_counter()
    for i, body in enumerate(bodies):
        k8s.CustomObjectsApi(bare[i % len(bare)]).create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "bare", "jobsets", body)
    bare_s = time.perf_counter() - t0
    for api in bare:
        api.close()
    return {"jobs": jobs, "apply_clusters": len(names), "bare_create_s": round(bare_s, 2)}


def broker_apply(work: Path, names: list[str], jobs: int, run: str, *, split: bool = False,
                 distinct: bool = False) -> dict:
    """The broker's dispatcher applying `jobs` placements (a database of its own): whole JobSets (their applies are
    the members' admission's question), or `split` ones of one part (each part asked first by a dry run: one for all
    the copies of a template on a member; `distinct`: each JobSet a template of its own)."""
    (work / run).mkdir()
    broker = Broker(work, names, database=work / run / "archipelago.db")
    try:
        broker.dispatcher.run_once()  # the sweep: the copies of the run before go
        manifests = [manifest(f"{run}-{i}", suspend=True, member=names[i % len(names)]) for i in range(jobs)]
        for i, body in enumerate(manifests):
            if split:
                body["metadata"]["annotations"]["archipelago.io/placement"] = "split"
            if distinct:
                body["metadata"]["annotations"]["bench.archipelago.io/template"] = str(i)
        broker.submit(manifests)
        while broker.count() < jobs:
            broker.scheduler.run_once()
        since = time.monotonic()
        t0 = time.perf_counter()
        while broker.count(Placement.state == "Starting") < jobs:
            broker.dispatcher.run_once()
        apply_s = time.perf_counter() - t0
    finally:
        broker.close()
    dry_runs = sum(1 for requests in sim_requests(work, since, names[0]).values() for _, method, _, query, _ in requests
                   if method == "PATCH" and "dryRun" in query)
    return {"apply_s": round(apply_s, 2), "dry_runs_per_placement": round(dry_runs / jobs, 3)}


def bench_status(work: Path, names: list[str], changes: int) -> dict:
    broker = Broker(work, names, member_workers=16)
    status = StatusService(broker.database, broker.settings, broker.members)
    patchers = {name: k8s.CustomObjectsApi(k8s_config.new_client_from_config(str(work / f"{name}.kubeconfig")))
                for name in names}
    try:
        broker.submit([manifest(f"run-{name}", member=name) for name in names])
        while broker.count() < len(names):
            broker.scheduler.run_once()
        while broker.count(Placement.state == "Starting") + broker.count(Placement.state == "Running") < len(names):
            broker.dispatcher.run_once()
        with broker.database.sessions() as session:
            job_of = {name: session.scalar(select(Job.id).where(Job.name == f"run-{name}")) for name in names}
        status.run_once()  # one watch per member
        deadline = time.monotonic() + 120
        while broker.count(Placement.state == "Running") < len(names):  # every watch has listed its member
            assert time.monotonic() < deadline, "the watches did not report every member running"
            time.sleep(0.05)
        lags = []
        for i in range(changes):
            name = names[i % len(names)]
            marker = f"Bench{i}"
            t0 = time.perf_counter()
            patchers[name].patch_namespaced_custom_object_status(JOBSET_GROUP, JOBSET_VERSION, "bench", "jobsets",
                                                                 f"run-{name}", {"status": {"conditions": [
                {"type": "Benchmark", "status": "True", "reason": marker, "message": "bench",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
            limit = t0 + 10
            while True:
                with broker.database.sessions() as session:
                    seen = session.scalar(select(Job.status).where(Job.id == job_of[name]))
                if any(c.get("reason") == marker for c in seen.get("conditions") or ()):
                    lags.append(time.perf_counter() - t0)
                    break
                if time.perf_counter() > limit:
                    raise RuntimeError(f"change {i} on {name} did not reach the broker in 10 s")
                time.sleep(0.002)
    finally:
        status.stop()
        for patcher in patchers.values():
            patcher.api_client.close()
        broker.close()
    lags.sort()
    return {"members": len(names), "changes": changes,
            "status_lag_p50_ms": round(statistics.median(lags) * 1000, 1),
            "status_lag_p99_ms": round(lags[max(int(len(lags) * 0.99) - 1, 0)] * 1000, 1),
            "status_lag_max_ms": round(lags[-1] * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--apply-clusters", type=int, default=4)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--changes", type=int, default=300)
    args = parser.parse_args()

    figures: dict = {}
    for step, (count, nodes) in (("apply", (args.apply_clusters, 16)), ("status", (args.members, 2))):
        work = Path(tempfile.mkdtemp(prefix=f"propagation-bench-{step}-"))
        names = [f"m{i:03d}" for i in range(count)]
        proc = start_simulator(work, names, nodes)
        try:
            figures.update(bench_apply(work, names, args.jobs) if step == "apply"
                           else bench_status(work, names, args.changes))
        finally:
            proc.terminate()
            proc.wait(30)
    rows = [(f"bare kubernetes client: create {args.jobs} JobSets, one by one", f"{figures['bare_create_s']:.2f} s", ""),
            (f"broker: {args.jobs} placements applied on {args.apply_clusters} members",
             f"{figures['broker_apply_s']:.2f} s", ""),
            ("ratio broker / bare client (whole JobSets: no dry run)", f"{figures['apply_ratio']:.2f}", "<= 1.5"),
            ("split parts of one template: dry runs per placement", f"{figures['dry_runs_per_placement_parts']}",
             "<= 1"),
            ("... their ratio, and its cost over whole JobSets'",
             f"{figures['apply_ratio_parts']:.2f} (+{figures['dry_run_cost_on_ratio']:.0%})", "<= +20%"),
            ("split parts each of its own template: dry runs per placement",
             f"{figures['dry_runs_per_placement_parts_distinct']}", "<= 1"),
            ("... their ratio, and its cost over whole JobSets'",
             f"{figures['apply_ratio_parts_distinct']:.2f} (+{figures['dry_run_cost_on_ratio_distinct']:.0%})", ""),
            (f"status change on a member -> broker, {args.members} members, p50",
             f"{figures['status_lag_p50_ms']} ms", ""),
            (f"status change on a member -> broker, p99 of {args.changes}", f"{figures['status_lag_p99_ms']} ms",
             "<= 1000 ms")]
    print_table(rows, figures)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
