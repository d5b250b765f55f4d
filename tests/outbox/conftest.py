"""The outbox's rules (broker/store/outbox/) one call at a time, on rows written straight into a real database:
no simulator, no API, no loop. Each test runs in milliseconds, so mutation testing (`make mutants`) kills
most of the outbox's mutants here before the propagation tests over the simulator would."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable, TypeVar

import pytest
from sqlalchemy import select

from broker.store.db.models import Cluster, Event, Job, Placement, Queue, Tenant

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
T = TypeVar("T")


def manifest(*parts: str, failure_policy: dict | None = None, success: dict | None = None,
             annotations: dict | None = None) -> dict:
    """A JobSet with one replica of one pod per ReplicatedJob named in `parts` (default: `workers`)."""
    spec: dict[str, Any] = {"replicatedJobs": [
        {"name": part, "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}}
        for part in parts or ("workers",)]}
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    if success is not None:
        spec["successPolicy"] = success
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "research", "annotations": annotations or {}}, "spec": spec}


def seen(*, uid: str = "uid-1", version: int = 10, generation: int = 1, ready: int = 0, succeeded: int = 0,
         part: str = "workers", terminal: str | None = None, message: str = "", applied: int | None = 1) -> dict:
    """A placement's stored member status (what `member_status` makes of the member's JobSet)."""
    conditions = [{"type": terminal, "status": "True", "message": message}] if terminal else []
    status = {"replicatedJobs": {part: {"ready": ready, "succeeded": succeeded, "failed": 0, "active": 0,
                                        "suspended": 0}},
              "expected": {part: {"replicas": 1, "dependsOn": []}}, "conditions": conditions, "restarts": 0,
              "terminalState": terminal, "uid": uid, "generation": generation, "resourceVersion": str(version)}
    return {**status, "appliedGeneration": applied} if applied is not None else status


def on_member(placement_id: int, *, uid: str = "uid-1", version: int = 11, generation: int = 1, ready: int = 0,
              part: str = "workers", terminal: str | None = None, message: str = "") -> dict:
    """The broker's copy as the member's watch or list shows it."""
    status: dict[str, Any] = {"replicatedJobsStatus": [{"name": part, "ready": ready, "succeeded": 0, "failed": 0,
                                                        "active": 0, "suspended": 0}]}
    if terminal:
        status["conditions"] = [{"type": terminal, "status": "True", "message": message}]
    return {"metadata": {"name": "train", "namespace": "research", "uid": uid, "generation": generation,
                         "resourceVersion": str(version),
                         "labels": {"archipelago.io/placement-id": str(placement_id)}},
            "spec": {"replicatedJobs": [{"name": part, "replicas": 1}]}, "status": status}


class Outbox:
    """Two Ready members and a queue; jobs and placements written as the scheduler and the loops leave them."""

    def __init__(self, db) -> None:
        self.db, self.made = db, 0
        with db.write() as session:
            tenant = Tenant(name="research", namespaces=["research"])
            session.add(Queue(name="training", tenant=tenant))
            for name in ("eu-west", "us-east"):
                session.add(Cluster(name=name, api_server=f"https://{name}", kubeconfig_encrypted=b"",
                                    state="Ready", labels={"region": name[:2]}))

    def cluster_id(self, name: str) -> int:
        with self.db.read() as session:
            return session.scalar(select(Cluster.id).where(Cluster.name == name))

    def job(self, *placements: dict, state: str = "Dispatching", mode: str = "whole", spec: dict | None = None,
            **fields: Any) -> int:
        """A job and its placements (each a dict of Placement fields; `cluster` names its member). The first job
        is `train`, the next `train-2`, ..."""
        self.made += 1
        fields.setdefault("name", "train" if self.made == 1 else f"train-{self.made}")
        with self.db.write() as session:
            queue = session.scalar(select(Queue))
            clusters = {c.name: c.id for c in session.scalars(select(Cluster))}
            job = Job(tenant_id=queue.tenant_id, queue_id=queue.id, namespace="research",
                      manifest=spec or manifest(), placement_mode=mode, state=state, **fields)
            session.add(job)
            session.flush()
            for given in placements:
                given = dict(given)
                cluster = given.pop("cluster", "eu-west")
                session.add(Placement(job_id=job.id, cluster_name=cluster,
                                      cluster_id=given.pop("cluster_id", clusters.get(cluster)), **given))
            return job.id

    def write(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One outbox step in its own write transaction, as the loops run it."""
        with self.db.write() as session:
            return step(session, *args, **kwargs)

    def read_job(self, job_id: int) -> Job:
        with self.db.read() as session:
            job = session.get(Job, job_id)
            session.expunge(job)
            return job

    def placements(self, job_id: int) -> list[Placement]:
        with self.db.read() as session:
            found = list(session.scalars(select(Placement).where(Placement.job_id == job_id).order_by(Placement.id)))
            session.expunge_all()
            return found

    def events(self, job_id: int) -> list[tuple[str, str]]:
        """(reason, message) of the job's events, oldest first."""
        with self.db.read() as session:
            return [(e.reason, e.message) for e in session.scalars(
                select(Event).where(Event.kind == "job", Event.object_id == str(job_id)).order_by(Event.id))]

    def warnings(self, job_id: int) -> list[str]:
        with self.db.read() as session:
            return list(session.scalars(select(Event.reason).where(
                Event.kind == "job", Event.object_id == str(job_id), Event.type == "Warning").order_by(Event.id)))


@pytest.fixture
def outbox(db) -> Outbox:
    return Outbox(db)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)
