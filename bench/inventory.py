"""Benchmark of the inventory sync, against one `python -m clusters.sim --tls` process.

Reports the time of one full sync of every member (first sync: every row inserted; resync: nothing
changed, nothing written), the time a node change on a member takes to reach the inventory through
the watches (a label patched on the member, until the node row shows it), and what a member's API
server is asked at steady state: requests per minute per member, by kind, with the inventory, status
and health loops running at their default intervals (counted by the simulator as they arrive).
Half the members have HyperNode objects; the others are described by fabric labels alone (ours, AWS's, GKE's,
NVLink cliques, in turn), their trees discovered by recipe: the time to discover all of those trees from their
nodes' labels, against the full sync's, and the time a node moved to another leaf takes to reach the tree.
Prints a table; the last line is one JSON object of the figures.

    python bench/inventory.py [--clusters 100] [--nodes 500] [--changes 30] [--steady 60] [--database-url URL]
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from cryptography.fernet import Fernet
from kubernetes import client as k8s, config as k8s_config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402

from broker.process.settings import Settings  # noqa: E402
from broker.services.inventory import ClusterHealthService, InventorySyncService  # noqa: E402
from broker.services.loop import ServiceRunner  # noqa: E402
from broker.services.members import MemberClients  # noqa: E402
from broker.services.status import StatusService  # noqa: E402
from broker.store.db.models import Cluster, HyperNode, Node  # noqa: E402
from broker.store.db.runtime import open_database  # noqa: E402
from broker.store.inventory import register_cluster  # noqa: E402
from clusters.member import MemberClient  # noqa: E402
from sqlalchemy import func, select  # noqa: E402


FABRICS = ("archipelago", "aws", "gke", "nvlink")


def discovery_time(database, settings: Settings) -> tuple[float, int]:
    """Seconds to discover the tree of every member without HyperNode objects from its stored node labels, one after
    another (a sync discovers them in its worker threads, beside the members' answers: this is at most what it adds),
    and how many members that was."""
    from broker.store.inventory import discovery_of

    with database.sessions() as session:
        clusters = list(session.scalars(select(Cluster).where(Cluster.hypernode_source != "crd")))
        labels = {c.id: dict(session.execute(select(Node.name, Node.labels).where(Node.cluster_id == c.id)).all())
                  for c in clusters}
        discoveries = {c.id: discovery_of(session, c, settings.topology_tier_labels) for c in clusters}
    t0 = time.perf_counter()
    for cluster in clusters:
        discoveries[cluster.id].discover(labels[cluster.id])
    return time.perf_counter() - t0, len(clusters)


def until(database, reached, t0: float, what: str) -> float:
    """Seconds from `t0` until `reached(session)` holds (asked every 2 ms; 10 s at most)."""
    while True:
        with database.sessions() as session:
            if reached(session):
                return time.perf_counter() - t0
        if time.perf_counter() > t0 + 10:
            raise RuntimeError(f"{what} did not reach the inventory in 10 s")
        time.sleep(0.002)


def start_simulator(work: Path, clusters: int, nodes: int) -> subprocess.Popen:
    scenario = {"defaults": {"nodes": nodes, "node": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                             "topology": {"leaf": 16, "spine": 4}, "hypernodes": "crd"},
                "clusters": [{"name": f"c{i:03d}", "hypernodes": "crd" if i % 2 else "labels",
                              "fabric": "archipelago" if i % 2 else FABRICS[i // 2 % len(FABRICS)]}
                             for i in range(clusters)]}
    (work / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    proc = subprocess.Popen([sys.executable, "-m", "clusters.sim", "--scenario", str(work / "scenario.yaml"),
                             "--port", "0", "--kubeconfig-dir", str(work), "--tls"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # kubeconfigs are written before serving
        if "admin token" in line:
            break
    deadline = time.monotonic() + 120
    while True:  # serving: the first member answers
        try:
            client = MemberClient.from_kubeconfig((work / "c000.kubeconfig").read_text())
            client.version()
            client.close()
            return proc
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.1)


def sim_requests(work: Path, since: float, member: str = "c000") -> dict[str, list]:
    """Each member's requests since that time.monotonic(), from the simulator's log (its admin API, reached at the
    address of `member`'s kubeconfig in `work`)."""
    cluster = yaml.safe_load((work / f"{member}.kubeconfig").read_text())["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    answer = httpx.post(cluster["server"].split("/clusters/")[0] + "/admin/requests", json={"since": since},
                        headers={"Authorization": f"Bearer {(work / 'admin-token').read_text().strip()}"},
                        verify=ssl.create_default_context(cadata=ca), timeout=30)
    answer.raise_for_status()
    return answer.json()["clusters"]


def kind_of(method: str, path: str, query: dict) -> str:
    segments = path.strip("/").split("/")
    if query.get("watch") == "true":
        return "watches"
    if method == "GET" and segments[-1] in ("nodes", "pods", "hypernodes", "jobsets", "resourceslices",
                                            "deviceclasses", "resourceclaims"):
        return "relists"
    if path == "/version":
        return "probes"
    if method == "GET" and segments[0] == "apis" and len(segments) in (1, 3):  # /apis, or one group version
        return "discovery"
    return "other"


def steady_state(database, settings: Settings, work: Path, names: list[str], seconds: float) -> dict[str, float]:
    """Requests per minute per member, by kind, over `seconds` once every member's watches are open."""
    interval = Settings.model_fields["cluster_sync_interval"].default
    settings = settings.model_copy(update={"cluster_sync_interval": interval})
    clients = MemberClients(settings)
    inventory = InventorySyncService(database, settings, clients)
    runner = ServiceRunner([inventory, StatusService(database, settings, clients),
                            ClusterHealthService(database, settings, clients)])
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while len(inventory.members) < len(names) or not all(
                m.watches and all(w.open for w in m.watches) for m in inventory.members.values()):
            if time.monotonic() > deadline:
                raise RuntimeError("the watches of every member did not open in 120 s")
            time.sleep(0.1)
        start = time.monotonic()
        time.sleep(seconds)
        asked = sim_requests(work, start)
    finally:
        runner.stop()
    counts = {kind: 0 for kind in ("watches", "relists", "discovery", "probes", "other")}
    for requests in asked.values():
        for at, method, path, query, _ in requests:
            if at < start + seconds:
                counts[kind_of(method, path, query)] += 1
    per_minute = 60.0 / seconds / len(names)
    return {"total": round(sum(counts.values()) * per_minute, 1),
            **{kind: round(count * per_minute, 2) for kind, count in counts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state to count requests over")
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--workers", type=int, default=Settings.model_fields["member_workers"].default,
                        help="members synced at once (ARCHIPELAGO_MEMBER_WORKERS)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="inventory-bench-"))
    settings = Settings(database_url=args.database_url or f"sqlite:///{work / 'archipelago.db'}",
                        secret_key=Fernet.generate_key().decode(), cluster_sync_interval=0.0,
                        member_workers=args.workers, _env_file=None)
    database = open_database(settings, upgrade=True)
    proc = start_simulator(work, args.clusters, args.nodes)
    members = MemberClients(settings)
    try:
        names = [f"c{i:03d}" for i in range(args.clusters)]
        t0 = time.perf_counter()
        for name in names:
            with database.write() as session:
                _, client = register_cluster(session, settings, name=name,
                                             kubeconfig=(work / f"{name}.kubeconfig").read_text())
            client.close()
        registration = time.perf_counter() - t0

        syncer = InventorySyncService(database, settings, members, watch=False)
        t0 = time.perf_counter()
        first = syncer.run_once()
        full_sync = time.perf_counter() - t0
        assert all(not isinstance(r, str) for r in first.values()), first
        with database.sessions() as session:
            stored = session.scalar(select(func.count()).select_from(Node))
        assert stored == args.clusters * args.nodes, stored
        t0 = time.perf_counter()
        syncer.run_once()
        resync = time.perf_counter() - t0
        syncer.stop()
        discovery, discovered = discovery_time(database, settings)

        watcher = InventorySyncService(database, settings.model_copy(update={"cluster_sync_interval": 3600.0}),
                                       MemberClients(settings))
        watcher.run_once()
        time.sleep(1.0)  # let every watch connect before the first change
        patchers = {name: k8s.CoreV1Api(k8s_config.new_client_from_config(str(work / f"{name}.kubeconfig")))
                    for name in names}
        rng = random.Random(7)
        latencies = []
        for i in range(args.changes):
            name, node = rng.choice(names), f"node-{rng.randrange(args.nodes):0{max(2, len(str(args.nodes - 1)))}d}"
            value = f"v{i}"
            t0 = time.perf_counter()
            patchers[name].patch_node(node, {"metadata": {"labels": {"bench": value}}})
            latencies.append(until(database, lambda s: s.scalar(select(Node.labels).join(Cluster).where(
                Cluster.name == name, Node.name == node)).get("bench") == value, t0, f"change {i} on {name}/{node}"))
        moves = []
        ours = [n for i, n in enumerate(names) if i % 2 == 0 and FABRICS[i // 2 % len(FABRICS)] == "archipelago"]
        for i in range(args.changes):  # a node of a member labelled our way moved to another leaf: until the tree says so
            name = rng.choice(ours)
            node, leaf = f"node-{rng.randrange(args.nodes):0{max(2, len(str(args.nodes - 1)))}d}", f"moved-{i}"
            t0 = time.perf_counter()
            patchers[name].patch_node(node, {"metadata": {"labels": {"network.archipelago.io/leaf": leaf}}})
            moves.append(until(database, lambda s: s.scalar(select(HyperNode.nodes).join(Cluster).where(
                Cluster.name == name, HyperNode.name == leaf)) == [node], t0, f"move {i} of {name}/{node}"))
        watcher.stop()
        for patcher in patchers.values():
            patcher.api_client.close()
        steady = steady_state(database, settings, work, names, args.steady)
    finally:
        members.close()
        proc.terminate()
        proc.wait(30)
        database.dispose()

    figures = {"clusters": args.clusters, "nodes_per_cluster": args.nodes, "workers": args.workers, "backend": database.engine.dialect.name,
               "registration_s": round(registration, 2), "full_sync_s": round(full_sync, 2),
               "resync_unchanged_s": round(resync, 2), "changes": args.changes,
               "change_p50_ms": round(statistics.median(latencies) * 1000, 1),
               "change_max_ms": round(max(latencies) * 1000, 1),
               "steady_s": args.steady, "requests_per_minute_per_member": steady,
               "discovered_members": discovered, "discovery_s": round(discovery, 3),
               "discovery_share_of_full_sync": round(discovery / full_sync, 3),
               "move_p50_ms": round(statistics.median(moves) * 1000, 1), "move_max_ms": round(max(moves) * 1000, 1)}
    rows = [(f"register {args.clusters} clusters (checks over HTTPS)", f"{registration:.2f} s", ""),
            (f"full sync, {args.clusters} x {args.nodes} nodes (all rows written)", f"{full_sync:.2f} s", "<= 10 s"),
            ("resync, nothing changed (no writes)", f"{resync:.2f} s", ""),
            (f"discovering the trees of the {discovered} members described by labels, one after another",
             f"{discovery:.2f} s ({discovery / full_sync:.0%} of the full sync)", "<= 20% of a full sync"),
            ("a node moved to another leaf -> the tree, median / max", f"{figures['move_p50_ms']} / "
             f"{figures['move_max_ms']} ms", "<= 1000 ms"),
            ("node change on a member -> inventory, median", f"{figures['change_p50_ms']} ms", ""),
            (f"node change on a member -> inventory, max of {args.changes}", f"{figures['change_max_ms']} ms",
             "<= 1000 ms"),
            (f"requests per minute per member at steady state ({args.steady:g} s, default intervals)",
             f"{steady['total']}", ""),
            ("  of which relists (nodes, pods, HyperNodes, JobSets)", f"{steady['relists']}",
             f"<= {2 * 60 / Settings.model_fields['cluster_sync_interval'].default:g} (2 per sync interval)"),
            ("  watches (re)started / discovery / health probes / other",
             f"{steady['watches']} / {steady['discovery']} / {steady['probes']} / {steady['other']}", "")]
    print_table(rows, figures)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
