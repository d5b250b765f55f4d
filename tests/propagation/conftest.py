"""A federation under test: two simulated members over HTTPS (time moved by hand), the API, and
the loop services driven one `run_once()` at a time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from broker.db.models import Event, Placement
from broker.services.members import MemberClients
from broker.services.stepper import Stepper
from clusters.jobsets import JOB_ID_LABEL
from clusters.sim.resources import JOBSETS
from clusters.sim.testing import SimHandle, running_simulator

ADMIN = {"Authorization": "Bearer admin-test-token"}
EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"
NVLINK = "topology.example.com/nvlink-block"
NODE = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
# 16 GPU nodes per member, two NVLink blocks per leaf pair: room for every example in either member.
SCENARIO = {
    "defaults": {"node": NODE, "topology": {"leaf": 8, "spine": 2}, "duration": "60s",
                 "nodes": [{"labels": {NVLINK: f"block-{i // 2}"}} for i in range(16)]},
    "clusters": [{"name": "eu-west", "labels": {"region": "eu"}}, {"name": "us-east", "labels": {"region": "us"}}],
}
TENANTS = [("team-a", "research"), ("team-b", "production"), ("hpc", "hpc")]


def example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def example_files() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("jobset-*.yaml"))


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


class Federation(Stepper):
    """The broker's loops, one step at a time, over a simulator whose clock moves only when told."""

    def __init__(self, sim: SimHandle, api: TestClient, db, settings) -> None:
        super().__init__(db, settings, MemberClients(settings), sim)
        self.sim, self.api, self.db = sim, api, db

    def submit(self, manifest: dict) -> int:
        tenant = manifest["metadata"]["namespace"]
        answer = self.api.post("/api/v1/jobs", json=manifest, params={"tenant": tenant})
        assert answer.status_code == 201, answer.text
        return answer.json()["items"][0]["id"]

    def job(self, job_id: int) -> dict:
        return self.api.get(f"/api/v1/jobs/{job_id}").json()

    def run_until(self, done: Callable[[], bool], *, seconds: float = 5.0, steps: int = 60) -> None:
        for _ in range(steps):
            if done():
                return
            self.step(seconds)
        assert done(), f"not done after {steps} steps of {seconds}s"

    def state(self, job_id: int) -> str:
        return self.job(job_id)["state"]

    def until_state(self, job_id: int, *states: str, seconds: float = 5.0, steps: int = 60) -> dict:
        self.run_until(lambda: self.state(job_id) in states, seconds=seconds, steps=steps)
        return self.job(job_id)

    def copies(self, job_id: int | None = None, cluster: str | None = None) -> list[dict]:
        """The broker's JobSets on the members (all, or one job's), as the members hold them."""
        selector = f"{JOB_ID_LABEL}={job_id}" if job_id is not None else JOB_ID_LABEL
        found = []
        for name in [cluster] if cluster else self.sim.cluster_names:
            member = self.sim.cluster(name)
            with member.lock:
                for obj in member.list(JOBSETS, None, selector, None)[0]:
                    found.append({**copy.deepcopy(obj), "cluster": name})
        return found

    def placements(self, job_id: int) -> list[Placement]:
        with self.db.sessions() as session:
            return list(session.scalars(select(Placement).where(Placement.job_id == job_id).order_by(Placement.id)))

    def reasons(self, job_id: int) -> list[str]:
        with self.db.sessions() as session:
            return list(session.scalars(select(Event.reason).where(Event.kind == "job", Event.object_id == str(job_id))
                                        .order_by(Event.id)))


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"member_timeout": 10.0, "member_workers": 4, "not_ready_grace": 0.0,
                                       "failover_toleration": 0.0})


@pytest.fixture
def scenario() -> dict:
    return SCENARIO


@pytest.fixture
def sim(scenario) -> Iterator[SimHandle]:
    with running_simulator(scenario, speed=0) as handle:
        yield handle


def populate(api, sim: SimHandle) -> None:
    """Through the API, as an admin: the tenants with a queue each, and the simulator's members registered."""
    for tenant, queue in TENANTS:
        assert api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).status_code == 201
        assert api.post("/api/v1/queues", json={"name": queue, "tenant": tenant,
                                                "preemption_policy": "LowerPriority"}).status_code == 201
    for name, labels in [("eu-west", {"region": "eu"}), ("us-east", {"region": "us"})]:
        if name in sim.cluster_names:
            answer = api.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name),
                                                        "labels": labels})
            assert answer.status_code == 201, answer.text


@pytest.fixture
def federation(sim, settings, db) -> Iterator[Federation]:
    with TestClient(create_app(settings, db, run_loops=False), headers=ADMIN) as api:
        fed = Federation(sim, api, db, settings)
        populate(api, sim)
        try:
            yield fed
        finally:
            fed.close()
