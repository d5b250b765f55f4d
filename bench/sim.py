"""Benchmark of the member-cluster simulator, against one `python -m clusters.sim` process.

Reports: resident memory serving 100 clusters x 500 nodes, the time to list all 500 nodes of one
cluster (raw HTTP, and through the official kubernetes client), and how many JobSets per second run
to completion at --speed 1000. Prints a table; the last line is one JSON object of the figures.

    python bench/sim.py [--clusters 100] [--nodes 500] [--jobsets 1000]
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

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _jobset(name: str) -> dict:
    def rjob(rname: str, replicas: int, pods: int) -> dict:
        return {"name": rname, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [rjob("driver", 1, 1), rjob("workers", 2, 2)]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobsets", type=int, default=1000)
    parser.add_argument("--speed", type=float, default=1000)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sim-bench-"))
    scenario = {"defaults": {"nodes": args.nodes, "node": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                             "topology": {"leaf": 16, "spine": 4}, "hypernodes": "crd"},
                "clusters": [{"name": f"c{i:03d}", "labels": {"region": ["eu", "us", "ap"][i % 3]}}
                             for i in range(args.clusters)]}
    (work / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "clusters.sim", "--scenario", str(work / "scenario.yaml"),
                             "--port", "0", "--kubeconfig-dir", str(work), "--speed", str(args.speed)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # readiness: the kubeconfigs are written before serving; then /healthz answers
        assert proc.stdout is not None
        for line in proc.stdout:
            if "admin token" in line:
                break
        first = yaml.safe_load((work / "c000.kubeconfig").read_text())
        base, token = first["clusters"][0]["cluster"]["server"], first["users"][0]["user"]["token"]
        root = base.split("/clusters/")[0]
        deadline = time.monotonic() + 120
        with httpx.Client(timeout=30) as http:
            while True:
                try:
                    if http.get(f"{root}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            startup = time.perf_counter() - started
            rss = _rss_mb(proc.pid)
            headers = {"Authorization": f"Bearer {token}"}

            samples = []
            for _ in range(20):
                t0 = time.perf_counter()
                response = http.get(f"{base}/api/v1/nodes", headers=headers)
                samples.append(time.perf_counter() - t0)
                assert len(response.json()["items"]) == args.nodes
            list_ms = statistics.median(samples) * 1000

            from kubernetes import client, config

            api = config.new_client_from_config(str(work / "c000.kubeconfig"))
            client_samples = []
            for _ in range(5):
                t0 = time.perf_counter()
                assert len(client.CoreV1Api(api).list_node().items) == args.nodes
                client_samples.append(time.perf_counter() - t0)
            client_ms = statistics.median(client_samples) * 1000
            api.close()

            http.post(f"{base}/api/v1/namespaces", json={"metadata": {"name": "bench"}}, headers=headers)
            t0 = time.perf_counter()
            for i in range(args.jobsets):
                response = http.post(f"{base}/apis/jobset.x-k8s.io/v1alpha2/namespaces/bench/jobsets",
                                     json=_jobset(f"js-{i:05d}"), headers=headers)
                assert response.status_code == 201, response.text
            submitted = time.perf_counter() - t0
            deadline = time.monotonic() + 300
            while True:
                items = http.get(f"{base}/apis/jobset.x-k8s.io/v1alpha2/namespaces/bench/jobsets",
                                 headers=headers).json()["items"]
                done = sum(1 for i in items if (i.get("status") or {}).get("terminalState") == "Completed")
                if done == args.jobsets:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {done}/{args.jobsets} JobSets completed")
                time.sleep(0.05)
            elapsed = time.perf_counter() - t0
            rss_after = _rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)

    figures = {
        "clusters": args.clusters, "nodes_per_cluster": args.nodes, "startup_s": round(startup, 2),
        "rss_mb": round(rss, 1), "node_list_ms": round(list_ms, 1), "node_list_client_ms": round(client_ms, 1),
        "jobsets": args.jobsets, "pods_per_jobset": 5, "speed": args.speed,
        "jobsets_per_s": round(args.jobsets / elapsed, 1), "submit_per_s": round(args.jobsets / submitted, 1),
        "rss_after_jobsets_mb": round(rss_after, 1),
    }
    rows = [
        ("process memory (RSS), %d clusters x %d nodes" % (args.clusters, args.nodes), f"{rss:.0f} MB", "<= 1024 MB"),
        ("start-up (scenario build + serving)", f"{startup:.1f} s", ""),
        (f"list {args.nodes} nodes, raw HTTP (median of 20)", f"{list_ms:.1f} ms", "<= 100 ms"),
        (f"list {args.nodes} nodes, kubernetes client (median of 5)", f"{client_ms:.1f} ms", ""),
        (f"JobSets run to completion at {args.speed:g}x (5 pods, 60 s each)", f"{args.jobsets / elapsed:.1f} /s", ""),
        ("JobSet submissions (sequential POST)", f"{args.jobsets / submitted:.1f} /s", ""),
        ("RSS after the JobSets", f"{rss_after:.0f} MB", ""),
    ]
    print_table(rows, figures)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
