"""An inventory in a real database (both backends), filled through the models, and the service under test."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event, func, select

from broker.engine.jobset import parse_jobset, placement_record
from broker.services.scheduler import SchedulerService
from broker.store.db.models import Cluster, Event, HyperNode, Job, Node, Placement, Queue, Tenant
from tests.placement.fixtures import GPU, manifest

_submitted = itertools.count()
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def add_cluster(session, name: str, leaves: int = 2, nodes_per_leaf: int = 4, gpus: int = 8,
                state: str = "Ready") -> Cluster:
    """A cluster of `leaves` tier-1 HyperNodes under one tier-2 spine, each leaf `nodes_per_leaf` GPU nodes."""
    cluster = Cluster(name=name, api_server=f"https://{name}:6443", kubeconfig_encrypted=b"-", state=state,
                      jobset_crd=True)
    leaf_names = [f"leaf-{i}" for i in range(leaves)]
    for leaf in leaf_names:
        members = [f"{name}-{leaf}-n{i}" for i in range(nodes_per_leaf)]
        cluster.hypernodes.append(HyperNode(name=leaf, tier=1, parent="spine", nodes=members))
        cluster.nodes += [Node(name=n, allocatable={"cpu": 64_000, "memory": 512 * 2**30 * 1000, GPU: gpus * 1000})
                          for n in members]
    cluster.hypernodes.append(HyperNode(name="spine", tier=2, nodes=[n.name for n in cluster.nodes]))
    session.add(cluster)
    return cluster


def add_queue(session, name: str = "q", tenant: str = "research", quota_gpus: int | None = None,
              preemption: str = "Never", reclaim: str = "Never", fair_share_preemption: str = "Never") -> Queue:
    owner = session.scalar(select(Tenant).where(Tenant.name == tenant)) or Tenant(
        name=tenant, namespaces=[tenant], fair_share_preemption=fair_share_preemption)
    queue = Queue(name=name, tenant=owner, preemption_policy=preemption, reclaim_within_cohort=reclaim,
                  nominal_quota={GPU: quota_gpus * 1000} if quota_gpus is not None else {})
    session.add(queue)
    return queue


def submit(session, queue: Queue, name: str, gpus: int = 8, pods: int = 1, priority: int = 1000,
           parts=None, annotations=None, state: str = "Queued") -> Job:
    """A job as submission stores it: manifest, placement record, resolved priority, demand, Queued."""
    body = manifest(name, parts or (("workers", 1, pods, gpus),), annotations, queue.name)
    spec = parse_jobset(body)
    job = Job(tenant=queue.tenant, queue=queue, name=name, namespace=queue.tenant.name, manifest=body,
              placement_spec=placement_record(spec), priority=priority, placement_mode=spec.placement, demand=dict(spec.requests), state=state,
              submitted_at=EPOCH + timedelta(seconds=next(_submitted)))
    session.add(job)
    return job


class Crash(Exception):
    pass


@contextmanager
def crash_at_the_events(db, slice_: int = 1):
    """The scheduler's commit dies once its placements and jobs are written, before its events: in the `slice_`th
    transaction that writes events (`commit_cycle` commits the decisions a slice of jobs per transaction)."""
    inserts = []

    def die(connection, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO EVENTS"):
            inserts.append(statement)
            if len(inserts) == slice_:
                raise Crash()

    event.listen(db.engine, "before_cursor_execute", die)
    try:
        with pytest.raises(Crash):
            yield
    finally:
        event.remove(db.engine, "before_cursor_execute", die)


def count(session, model, *where) -> int:
    return session.scalar(select(func.count()).select_from(model).where(*where))


def job_events(session, job_id: int, reason: str | None = None) -> list[Event]:
    query = select(Event).where(Event.kind == "job", Event.object_id == str(job_id)).order_by(Event.id)
    return list(session.scalars(query.where(Event.reason == reason) if reason else query))


def placements_of(session, job_id: int) -> list[Placement]:
    return list(session.scalars(select(Placement).where(Placement.job_id == job_id).order_by(Placement.id)))


@pytest.fixture
def setup(db):
    """`with setup() as session:` one committed transaction that fills the inventory."""
    return db.write


@pytest.fixture
def scheduler(db, settings) -> SchedulerService:
    return SchedulerService(db, settings)
