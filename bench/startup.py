"""Benchmark of startup truth: of the JobSets the broker admits, how many start — every pod bound and ready —
on members that behave like busy real clusters (issue #11).

Members (simulated, speed 0, time moved by the benchmark): 4 × 16 nodes of 8 GPUs; their control planes get
to a new JobSet, and to its Jobs, 20 simulated seconds late; half their nodes run someone else's 4-GPU pod
made through the API. A stream of JobSets of 1–8 pods × 4 or 8 GPUs, 3–15 minutes each, arrives faster than
the federation can run them. The broker's loops run one pass per 10 simulated seconds, inventory first.

Reports the share of admitted JobSets whose pods all started on their first placement (target 100%), the
evictions (pods not ready within the startup timeout), pods the members left Pending for want of room,
and the median time from admission to every pod ready. Prints a table; the last line is one JSON object.

    python bench/startup.py [--jobs 160] [--steps 500] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402

from broker.process.settings import Settings  # noqa: E402
from broker.services.members import MemberClients  # noqa: E402
from broker.services.stepper import Stepper  # noqa: E402
from broker.store.capacity import federation_capacity  # noqa: E402
from broker.store.db.models import Job, Queue, Tenant  # noqa: E402
from broker.store.db.runtime import open_database  # noqa: E402
from broker.store.inventory import register_cluster  # noqa: E402
from broker.store.jobs import submit_jobs  # noqa: E402
from broker.store.tenancy import submitter_named  # noqa: E402
from clusters.sim.resources import PODS  # noqa: E402
from clusters.sim.testing import running_simulator  # noqa: E402

MEMBERS = ["m0", "m1", "m2", "m3"]
NODE = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
STEP = 10.0  # simulated seconds per pass of the loops
PLACED = ("Admitted", "Dispatching", "Starting", "Running")
SETTLE_STEPS = 12  # two minutes: three times the control planes' lag


def jobset(name: str, pods: int, gpus: int, minutes: int) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "bench",
                         "annotations": {"sim.archipelago.io/duration": f"{minutes}m"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer", "resources": {
                        "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}}]}}


class Federation(Stepper):
    """A broker on an SQLite file with the members registered, its loops stepped with the simulator's time."""

    def __init__(self, sim, work: Path) -> None:
        self.sim = sim
        self.settings = Settings(database_url=f"sqlite:///{work / 'archipelago.db'}", _env_file=None,
                                 secret_key=Fernet.generate_key().decode())
        self.database = open_database(self.settings, upgrade=True)
        for name in MEMBERS:
            with self.database.write() as session:
                _, member = register_cluster(session, self.settings, name=name, labels={},
                                             kubeconfig=sim.kubeconfig(name))
            member.close()
        with self.database.write() as session:
            session.add(Queue(name="bench", tenant=Tenant(name="bench", namespaces=["bench"]), is_default=True))
        super().__init__(self.database, self.settings, MemberClients(self.settings), sim)

    def submit(self, manifests: list[dict]) -> None:
        with self.database.write() as session:
            tenant = submitter_named(session, session.scalar(select(Tenant.name)))
            submit_jobs(session, tenant, manifests, self.settings, federation_capacity(session), batch=True)

    def unschedulable_pods(self) -> int:
        """The broker's pods a member's scheduler could not bind (no room where the broker pinned them)."""
        count = 0
        for name in MEMBERS:
            member = self.sim.cluster(name)
            with member.lock:
                pods = member.list(PODS, "bench", None, None)[0]
            count += sum(1 for p in pods if not p["spec"].get("nodeName") and any(
                c.get("reason") == "Unschedulable" for c in p.get("status", {}).get("conditions") or ()))
        return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=160)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    trace = [jobset(f"j{i:04d}", rng.choice([1, 2, 4, 8]), rng.choice([4, 8]), rng.randint(3, 15))
             for i in range(args.jobs)]
    scenario = {"defaults": {"nodes": 16, "node": NODE, "topology": {"leaf": 8, "spine": 2}, "duration": "10m",
                             "controller_lag": "20s"},
                "clusters": [{"name": name} for name in MEMBERS]}
    started_at = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, running_simulator(scenario, speed=0) as sim:
        for name in MEMBERS:
            sim.others_pods(name, {"nvidia.com/gpu": "4"}, nodes=8)
        federation = Federation(sim, Path(tmp))
        stuck = 0
        admitted_at: dict[int, int] = {}  # job -> first step it was seen placed
        ready_at: dict[int, int] = {}  # job -> first step it was seen Running (every pod ready)
        try:
            # the last steps admit nothing new to the count: those admitted before have time to start
            for step in range(args.steps + SETTLE_STEPS):
                if trace and step % 2 == 0:
                    federation.submit([trace.pop(0) for _ in range(min(4, len(trace)))])
                federation.step(STEP)
                stuck = max(stuck, federation.unschedulable_pods())
                with federation.database.sessions() as session:
                    for job_id, state in session.execute(select(Job.id, Job.state).where(Job.state.in_(PLACED))):
                        if step < args.steps:
                            admitted_at.setdefault(job_id, step)
                        if state == "Running" and job_id in admitted_at:
                            ready_at.setdefault(job_id, step)
            with federation.database.sessions() as session:
                evictions = dict(session.execute(select(Job.id, Job.evictions)).all())
                succeeded = session.scalar(select(func.count()).select_from(Job).where(Job.state == "Succeeded"))
        finally:
            federation.close()
    clean = [j for j in ready_at if evictions[j] == 0]
    delays = [(ready_at[j] - admitted_at[j]) * STEP for j in ready_at]
    share = 100.0 * len(clean) / len(admitted_at) if admitted_at else 0.0
    figures = {"jobs": args.jobs, "admitted": len(admitted_at), "started_first_time": len(clean),
               "started_share_pct": round(share, 1), "evictions": sum(evictions.values()),
               "max_unschedulable_pods": stuck,
               "admission_to_ready_median_s": statistics.median(delays) if delays else None,
               "succeeded": succeeded, "wall_s": round(time.perf_counter() - started_at, 1)}
    print_table([
        ("JobSets admitted (of the trace)", f"{len(admitted_at)} of {args.jobs}", ""),
        ("admitted JobSets whose pods all started, first time", f"{share:.1f}%", "100%"),
        ("evictions (pods not ready in time)", str(figures["evictions"]), "0"),
        ("most of the broker's pods left unschedulable at once", str(stuck), "0"),
        ("admission to every pod ready, median (simulated, in steps of 10 s)",
         f"{figures['admission_to_ready_median_s']} s", "the control planes' lag: 40 s"),
        ("JobSets succeeded", str(figures["succeeded"]), ""),
    ], figures)


if __name__ == "__main__":
    main()
