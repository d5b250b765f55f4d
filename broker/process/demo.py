"""`archipelago demo`: the whole federation on one machine, on the embedded defaults.

Three simulated member clusters of different shapes, the broker with every loop service, two tenants
with queues of different weights, and a stream of JobSets shaped like ../shared/examples (varied
sizes and priorities, some `split`, some `hard` topology, an occasional failure). One cluster drops
off the network for a minute and comes back, so the dashboard shows failover too.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from broker.process.settings import Settings, new_token
from broker.process.tls import SelfSigned, self_signed

NVLINK_BLOCK = "topology.example.com/nvlink-block"  # the exclusive topology of ../shared/examples' multislice JobSet
# A JobSet submitted by hand (the README's quick start) runs two simulated hours unless its
# `sim.archipelago.io/duration` annotation says otherwise: at the demo's speed, minutes to look at it and cancel it.
SCENARIO = {"defaults": {"duration": "2h"}, "clusters": [
    {"name": "h100-eu", "labels": {"region": "eu", "gpu": "h100", "provider": "onprem"},
     "nodes": [{"labels": {NVLINK_BLOCK: f"nvl-{i // 2}"}} for i in range(32)],  # NVLink blocks of two hosts
     "node": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}, "topology": {"leaf": 8, "spine": 2},
     "hypernodes": "crd", "zones": ["eu-west-1a", "eu-west-1b"]},
    {"name": "a100-us", "labels": {"region": "us", "gpu": "a100", "provider": "cloud"}, "nodes": 16,
     "node": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}, "topology": {"leaf": 4, "spine": 2},
     "hypernodes": "labels", "fabric": "aws", "zones": ["us-east-1a", "us-east-1b"]},  # an EC2 UltraCluster
    {"name": "cpu-eu", "labels": {"region": "eu", "gpu": "none", "provider": "cloud"}, "nodes": 8,
     "node": {"cpu": "64", "memory": "256Gi"}, "topology": {"leaf": 8, "spine": 1}, "hypernodes": "none"},
]}
TENANTS = {
    "research": {"namespaces": ["team-a"], "queues": {
        "research": {"weight": 3, "nominal_quota": {"nvidia.com/gpu": "128"}, "default": True},
        "eval": {"weight": 1, "borrowing_limit": {"nvidia.com/gpu": "32"}}}},
    "vision": {"namespaces": ["team-b"], "queues": {
        "production": {"weight": 2, "priority": 10, "preemption_policy": "LowerPriority", "default": True}}},
}
FLAKY_CLUSTER = "a100-us"
# Cluster overrides: what each member's copy is rewritten with (the dashboard's job page shows them).
OVERRIDES = [
    {"name": "eu-mirror", "order": 1, "selector": "region=eu", "description": "the EU registry mirror",
     "image": {"registry": "mirror.eu.example", "from": "ghcr.io"}},
    {"name": "h100-fabric", "order": 2, "cluster": "h100-eu", "description": "NCCL over the H100 fabric",
     "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}, {"name": "NCCL_CROSS_NIC", "value": "1"}]},
]


def _container(name: str, cpu: str, memory: str, gpus: int) -> dict:
    requests = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}  # a device is never overcommitted: its limit is needed
    return {"name": name, "image": f"ghcr.io/example/{name}:1", "resources": {"requests": requests, "limits": limits}}


def _rjob(name: str, replicas: int, parallelism: int, container: dict) -> dict:
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}}


def random_jobset(rng: random.Random, serial: int, speed: float = 20.0) -> tuple[str, dict]:
    """One JobSet of the example shapes, with its tenant. Three in four declare how long they run, in the broker's
    time (the simulated minutes at the demo's `speed`): the forecast and backfill read it."""
    shape = rng.choices(["multislice", "driver-workers", "split-eval", "mpi", "cpu-sweep"], [4, 2, 2, 1, 2])[0]
    minutes = rng.randint(3, 12)
    annotations = {"sim.archipelago.io/duration": f"{minutes}m"}
    if rng.random() < 0.75:
        annotations["archipelago.io/expected-runtime"] = f"{max(1, round(minutes * 60 / speed))}s"
    labels: dict[str, str] = {}
    if shape == "multislice":
        tenant, namespace, queue = "research", "team-a", rng.choice(["research", "research", "eval"])
        slices = rng.choice([1, 2, 4])
        annotations |= {"archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "2"}
        rjobs = [_rjob("slice", slices, 2, _container("trainer", "32", "256Gi", 8))]
    elif shape == "driver-workers":
        tenant, namespace, queue = "vision", "team-b", "production"
        labels["kueue.x-k8s.io/priority-class"] = rng.choice(["normal", "high"])
        rjobs = [_rjob("driver", 1, 1, _container("driver", "4", "16Gi", 0)),
                 _rjob("workers", rng.choice([2, 4]), 1, _container("worker", "32", "256Gi", 8))]
    elif shape == "split-eval":
        tenant, namespace, queue = "research", "team-a", "eval"
        annotations["archipelago.io/placement"] = "split"
        rjobs = [_rjob(f"shard-{s}", 2, 2, _container("eval", "8", "32Gi", 1)) for s in "ab"]
    elif shape == "mpi":
        tenant, namespace, queue = "research", "team-a", "research"
        annotations["archipelago.io/network-topology-mode"] = "soft"
        rjobs = [_rjob("launcher", 1, 1, _container("launcher", "2", "4Gi", 0)),
                 _rjob("worker", 1, rng.choice([4, 8]), _container("mpi", "48", "384Gi", 8))]
    else:
        tenant, namespace, queue = "vision", "team-b", "production"
        labels["kueue.x-k8s.io/priority-class"] = "low"
        annotations["archipelago.io/cluster-selector"] = "gpu=none"
        rjobs = [_rjob("sweep", rng.choice([2, 4, 8]), 1, _container("sweep", "16", "32Gi", 0))]
    if rng.random() < 0.08:
        annotations["sim.archipelago.io/fail"] = rjobs[-1]["name"]
        annotations["sim.archipelago.io/fail-attempts"] = "1"
    labels["kueue.x-k8s.io/queue-name"] = queue
    manifest = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": f"{shape}-{serial:04d}", "namespace": namespace, "labels": labels,
                             "annotations": annotations},
                "spec": {"replicatedJobs": rjobs, "failurePolicy": {"maxRestarts": 2}}}
    return tenant, manifest


@dataclass
class DemoState:
    submitted: int = 0
    outage: str = "not yet"
    errors: list[str] = field(default_factory=list)


def demo_settings(workdir: Path, admin_token: str, port: int, tls: SelfSigned | None = None) -> Settings:
    """Embedded defaults, with loops fast enough that a minute shows queues filling and draining; HTTPS with `tls`."""
    return Settings(database_url=f"sqlite:///{workdir.resolve() / 'archipelago.db'}", admin_token=admin_token,
                    port=port, tls_certfile=tls and tls.certfile, tls_keyfile=tls and tls.keyfile,
                    scheduler_interval=1.0, dispatch_interval=0.5, status_poll_interval=2.0,
                    cluster_sync_interval=5.0, health_probe_interval=2.0, not_ready_grace=6.0,
                    failover_toleration=30.0, forecast_interval=5.0,
                    forecast_default_runtime=30.0, _env_file=None)  # a demo job runs 9-36 s


DEMO_MARKER = ".archipelago-demo"


SUMMARY_EVERY = 10.0  # seconds between the summaries a pipe or a log gets


def _fresh_workdir(workdir: Path) -> None:
    """Start from nothing, but only ever wipe a folder an earlier demo made."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / DEMO_MARKER).exists():
            raise SystemExit(f"archipelago: {workdir} is not empty and was not made by the demo; "
                             "pick another --workdir")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / DEMO_MARKER).write_text("made by `archipelago demo`; the next demo deletes this folder\n")


@contextlib.contextmanager
def _logging_to(path: Path) -> Iterator[None]:
    """The services' log goes to a file while the demo runs, so the terminal keeps the live table."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logging.getLogger("httpx").level
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the demo's own API calls
    try:
        yield
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        logging.getLogger("httpx").setLevel(saved[2])
        handler.close()


@contextlib.contextmanager
def _broker(settings: Settings) -> Iterator[str]:
    from api.app import create_app
    from broker.store.db.runtime import open_database
    import uvicorn

    database = open_database(settings, upgrade=True)
    tls = {"ssl_certfile": settings.tls_certfile, "ssl_keyfile": settings.tls_keyfile} if settings.tls_certfile else {}
    server = uvicorn.Server(uvicorn.Config(create_app(settings, database), host=settings.host, port=settings.port,
                                           log_level="warning", access_log=False, **tls))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise SystemExit(f"archipelago: the broker could not listen on {settings.host}:{settings.port}")
        time.sleep(0.05)
    try:
        yield f"{'https' if tls else 'http'}://{settings.host}:{settings.port}"
    finally:
        server.should_exit = True
        thread.join(30)
        database.dispose()


def _setup(api: httpx.Client, sim, trust: ssl.SSLContext) -> dict[str, tuple[str, httpx.Client]]:
    for cluster in SCENARIO["clusters"]:
        answer = api.post("/api/v1/clusters", json={"name": cluster["name"], "kubeconfig": sim.kubeconfig(
            cluster["name"]), "labels": cluster["labels"]})
        answer.raise_for_status()
    for rule in OVERRIDES:
        api.post("/api/v1/overrides", json=rule).raise_for_status()
    tenants = {}
    for tenant, spec in TENANTS.items():
        api.post("/api/v1/tenants", json={"name": tenant, "namespaces": spec["namespaces"]}).raise_for_status()
        for queue, fields in spec["queues"].items():
            api.post("/api/v1/queues", json={"name": queue, "tenant": tenant, **fields}).raise_for_status()
        token = api.post("/api/v1/tokens", json={"role": "tenant", "tenant": tenant,
                                                 "description": "demo"}).json()["token"]
        tenants[tenant] = token, httpx.Client(base_url=api.base_url, headers={"Authorization": f"Bearer {token}"},
                                              verify=trust,
                                              timeout=30)
    return tenants


def _write_env(workdir: Path, who: str, url: str, token: str, ca: Path, settings: Settings | None = None) -> str:
    """`<who>.env` in the workdir, for `source`, and the line it holds (the broker's CA for the CLI's HTTPS); the
    admin's also names the demo's database, for the commands that act on it directly (`tokens create`)."""
    line = f"export ARCHIPELAGO_SERVER={url} ARCHIPELAGO_TOKEN={token} ARCHIPELAGO_CERTIFICATE_AUTHORITY={ca}"
    if settings is not None:  # its key is kept beside the SQLite file
        line += f" ARCHIPELAGO_DATABASE_URL={settings.database_url}"
    path = workdir / f"{who}.env"
    path.write_text(line + "\n")
    path.chmod(0o600)
    return line


def _status_table(api: httpx.Client, state: DemoState, url: str, admin_token: str) -> Table:
    table = Table(title=f"Archipelago demo — dashboard {url}  (admin token {admin_token})", expand=True)
    for column in ("cluster", "state", "GPUs used/total", "queue", "pending", "running"):
        table.add_column(column)
    clusters = api.get("/api/v1/clusters").json()
    queues = api.get("/api/v1/queues").json()
    for i in range(max(len(clusters), len(queues))):
        row = []
        if i < len(clusters):
            c = clusters[i]
            gpu = (c.get("capacity") or {}).get("nvidia.com/gpu") or {}
            row += [c["name"], c["state"], f"{gpu.get('used', '0')}/{gpu.get('allocatable', '0')}"]
        else:
            row += ["", "", ""]
        if i < len(queues):
            q = queues[i]
            row += [f"{q['tenant']}/{q['name']}", str(q["pending"]), str(q["running"])]
        else:
            row += ["", "", ""]
        table.add_row(*row)
    counts = api.get("/metrics").text
    finished = {s: _metric(counts, s) for s in ("Succeeded", "Failed", "Running", "Queued")}
    table.caption = (f"submitted {state.submitted} · " + " · ".join(f"{k} {v}" for k, v in finished.items())
                     + f" · outage of {FLAKY_CLUSTER}: {state.outage} · Ctrl-C stops")
    return table


def _summary(api: httpx.Client, state: DemoState, elapsed: float) -> str:
    """One line for a log or a pipe: what the live table shows."""
    counts = api.get("/metrics").text
    jobs = " · ".join(f"{s} {_metric(counts, s)}" for s in ("Queued", "Running", "Succeeded", "Failed"))
    clusters = ", ".join(f"{c['name']} {c['state']}" for c in api.get("/api/v1/clusters").json())
    return (f"[{elapsed:4.0f} s] submitted {state.submitted} · {jobs} · clusters: {clusters} · outage of "
            f"{FLAKY_CLUSTER}: {state.outage}")


def _metric(text: str, state: str) -> int:
    for line in text.splitlines():
        if line.startswith(f'archipelago_jobs{{state="{state}"}}'):
            return int(float(line.split()[-1]))
    return 0


def run_demo(*, port: int = 8000, sim_port: int = 0, workdir: Path = Path("demo-run"), speed: float = 20.0,
             duration: float | None = None, seed: int = 7, outage_after: float = 60.0,
             outage_for: float = 60.0, console: Console | None = None) -> DemoState:
    """Run until Ctrl-C (or `duration` seconds); everything started here is stopped before returning."""
    from clusters.sim.testing import running_simulator

    console = console or Console()
    _fresh_workdir(workdir)
    admin_token = new_token()
    tls = self_signed(workdir.resolve() / "tls", "127.0.0.1")  # kubectl sends its token over HTTPS only
    settings = demo_settings(workdir, admin_token, port, tls)
    trust = ssl.create_default_context(cafile=str(tls.ca))
    state = DemoState()
    rng = random.Random(seed)
    with _logging_to(workdir / "broker.log"), running_simulator(SCENARIO, speed=speed, tls=True) as sim, \
            _broker(settings) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30,
                         verify=trust) as api:
        sim.write_kubeconfigs(workdir)
        setup = _setup(api, sim, trust)
        tenants = {tenant: client for tenant, (_, client) in setup.items()}
        console.print(f"[bold]Dashboard[/bold] {url}/  (sign in with a token below; the browser asks to trust "
                      f"{tls.ca}, the demo's own CA)", soft_wrap=True)
        for who, token in (("admin", admin_token), *((tenant, token) for tenant, (token, _) in setup.items())):
            line = _write_env(workdir, who, url, token, tls.ca, settings if who == "admin" else None)
            console.print(f"[bold]{who}[/bold]: {line}   (or: source {workdir}/{who}.env)", soft_wrap=True,
                          highlight=False)
        console.print(f"Simulated members at {sim.url}; their kubeconfigs and broker.log in {workdir}/",
                      soft_wrap=True)
        started = time.monotonic()
        next_submit, next_summary = started, started + SUMMARY_EVERY
        # a terminal gets the live table; a pipe or a log a line per phase and a summary every SUMMARY_EVERY s
        live = Live(_status_table(api, state, url, admin_token), console=console, refresh_per_second=1) \
            if console.is_terminal else contextlib.nullcontext()
        say = (lambda line: None) if console.is_terminal else (lambda line: console.print(line, soft_wrap=True))
        say(f"phase: {len(SCENARIO['clusters'])} members registered, 2 tenants; submitting a JobSet every "
            f"0.5-2 s; {FLAKY_CLUSTER} becomes unreachable after {outage_after:g} s for {outage_for:g} s")
        try:
            with live:
                while duration is None or time.monotonic() - started < duration:
                    now = time.monotonic()
                    elapsed = now - started
                    if now >= next_submit:
                        tenant, manifest = random_jobset(rng, state.submitted, speed)
                        answer = tenants[tenant].post("/api/v1/jobs", json=manifest)
                        if answer.status_code == 201:
                            state.submitted += 1
                        else:
                            state.errors.append(answer.text[:200])
                        next_submit = now + rng.uniform(0.5, 2.0)
                    if state.outage == "not yet" and elapsed >= outage_after:
                        sim.make_unreachable(FLAKY_CLUSTER)
                        state.outage = "now"
                        say(f"phase: {FLAKY_CLUSTER} is unreachable: its work fails over once it is NotReady")
                    elif state.outage == "now" and elapsed >= outage_after + outage_for:
                        sim.heal(FLAKY_CLUSTER)
                        state.outage = "over"
                        say(f"phase: {FLAKY_CLUSTER} is back")
                    if console.is_terminal:
                        live.update(_status_table(api, state, url, admin_token))
                    elif now >= next_summary:
                        say(_summary(api, state, elapsed))
                        next_summary = now + SUMMARY_EVERY
                    time.sleep(0.25)
            say(_summary(api, state, time.monotonic() - started))
        except KeyboardInterrupt:
            console.print("stopping…")
        finally:
            for client in tenants.values():
                client.close()
    console.print(f"demo stopped; {state.submitted} JobSets submitted. The database stays in {workdir}/.")
    return state
