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
from broker.process.testing import SCENARIO, TENANTS
from broker.services.members import MemberClients
from broker.services.stepper import Stepper
from broker.store.db.models import Event, Placement
from clusters.jobsets import JOB_ID_LABEL
from clusters.sim.resources import JOBSETS
from clusters.sim.testing import SimHandle, running_simulator

ADMIN = {"Authorization": "Bearer admin-test-token"}
EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"


def example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def example_files() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("jobset-*.yaml"))


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
    return settings.model_copy(update={"member_timeout": 10.0, "lease_duration": 30.0, "member_workers": 4,
                                       "not_ready_grace": 0.0,
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
