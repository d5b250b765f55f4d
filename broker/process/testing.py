"""What the tests and the benchmarks share to run a broker: `archipelago serve` in a subprocess, for those that kill
a replica and start it again, and a federation of two simulated members with the JobSets and tenants they run.
Nothing in the broker's own code imports this."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import httpx
from sqlalchemy import select

from broker.process.settings import Settings
from broker.store.db.models import LEADER, Lease
from clusters.jobsets import JOB_ID_LABEL
from clusters.sim.resources import JOBSETS
from clusters.sim.testing import SimHandle

ADMIN = "crash-test-admin-token"
DEADLINE = 30.0
FAST_LOOPS = {"ARCHIPELAGO_SCHEDULER_INTERVAL": "0.2", "ARCHIPELAGO_DISPATCH_INTERVAL": "0.2",
              "ARCHIPELAGO_STATUS_POLL_INTERVAL": "0.5", "ARCHIPELAGO_HEALTH_PROBE_INTERVAL": "1",
              "ARCHIPELAGO_MEMBER_TIMEOUT": "1"}
DEFAULT_LOOPS = {key: str(Settings.model_fields[key.removeprefix("ARCHIPELAGO_").lower()].default)
                 for key in FAST_LOOPS}  # what a deployment runs, for the benchmarks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One `archipelago serve` process (a replica) on the given database, its log in `directory/<name>.log`."""

    def __init__(self, directory: Path, *, database_url: str, secret_key: str, env: dict[str, str] | None = None,
                 name: str = "broker", args: tuple[str, ...] = ()) -> None:
        self.directory, self.name, self.args, self.port = directory, name, args, free_port()
        self.env = {**os.environ, "ARCHIPELAGO_DATABASE_URL": database_url, "ARCHIPELAGO_SECRET_KEY": secret_key,
                    "ARCHIPELAGO_ADMIN_TOKEN": ADMIN, **FAST_LOOPS, **(env or {})}
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

    def start(self, env: dict[str, str] | None = None, *, wait: bool = True) -> None:
        log = open(self.directory / f"{self.name}.log", "ab")
        command = str(Path(sys.executable).parent / "archipelago")
        self.process = subprocess.Popen([command, "serve", "--port", str(self.port), *self.args],
                                        env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            wait_for(self.ready, f"{self.name} to answer")

    def ready(self) -> bool:
        assert self.process.poll() is None, f"{self.name} exited: {self.log()}"
        try:
            return self.api.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return (self.directory / f"{self.name}.log").read_text()[-3000:]

    def killed(self) -> int:
        """Wait for the process to die (at its crash point); its exit status."""
        return self.process.wait(DEADLINE)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(DEADLINE)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(DEADLINE)
        self.api.close()

    def state(self, job_id: int) -> str:
        return self.api.get(f"/api/v1/jobs/{job_id}").json()["state"]


def leader_pid(engine) -> int | None:
    """The process that holds the leader lease (its holder is host/pid/nonce), or None."""
    with engine.connect() as connection:
        holder = connection.scalar(select(Lease.holder).where(Lease.name == LEADER))
    return int(holder.split("/")[1]) if holder else None


def wait_for(condition: Callable[[], bool], what: str, tick: Callable[[], None] = lambda: None,
             deadline: float = DEADLINE) -> None:
    until = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        tick()
        time.sleep(0.05)


def copies(sim: SimHandle) -> list[dict]:
    """The broker's JobSets on every member, as the members hold them."""
    found = []
    for name in sim.cluster_names:
        member = sim.cluster(name)
        with member.lock:
            found += member.list(JOBSETS, None, JOB_ID_LABEL, None)[0]
    return found


NVLINK = "topology.example.com/nvlink-block"
NODE = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
# 16 GPU nodes per member, two NVLink blocks per leaf pair: room for every example in either member.
SCENARIO = {
    "defaults": {"node": NODE, "topology": {"leaf": 8, "spine": 2}, "duration": "60s",
                 "nodes": [{"labels": {NVLINK: f"block-{i // 2}"}} for i in range(16)]},
    "clusters": [{"name": "eu-west", "labels": {"region": "eu"}}, {"name": "us-east", "labels": {"region": "us"}}],
}
TENANTS = [("team-a", "research"), ("team-b", "production"), ("hpc", "hpc")]


def jobset(name: str, *, namespace: str = "team-a", parts=(("workers", 1, 2, 8),), split: bool = False,
           annotations: dict | None = None, failure_policy: dict | None = None, success: dict | None = None,
           priority_class: str | None = None) -> dict:
    """A JobSet with `parts` = (name, replicas, pods per Job, GPUs per pod)."""
    labels = {"kueue.x-k8s.io/queue-name": dict(TENANTS)[namespace]}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    spec: dict = {"replicatedJobs": [
        {"name": part, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "resources": {
                    "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}}
        for part, replicas, pods, gpus in parts]}
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    if success is not None:
        spec["successPolicy"] = success
    meta_annotations = {**({"archipelago.io/placement": "split"} if split else {}), **(annotations or {})}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": meta_annotations},
            "spec": spec}
