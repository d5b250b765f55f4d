"""What the scheduler keeps between cycles beside the pending rows, and that its decisions are still a full read's: the
parts that jobs of one shape share, the clusters' nodes (read again only where their inventory changed), and each
JSON text decoded once (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from broker.engine.jobset import parse_jobset
from broker.engine.placement import Config, schedule, shape_of
from broker.services.scheduler import SchedulerService
from broker.store.capacity import FederationCapacity, KnownClusters, federation_capacity
from broker.store.db.models import Cluster, Job, Node, Placement
from broker.store.scheduling import (NODES_BETWEEN_PAUSES, KeptClusters, commit_cycle, pending as scheduling_module,
                                     read_inventory)
from tests.placement.fixtures import GPU, manifest as job_manifest
from tests.scheduler.conftest import EPOCH, add_cluster, add_queue, submit
from tests.scheduler.test_incremental import Clock, assert_same_as_a_full_read


@pytest.mark.parametrize("recorded", [True, False], ids=["placement records", "one parsed from its manifest"])
def test_pending_jobs_of_one_shape_share_their_parts(db, setup, settings, recorded):
    """One copy of the parts per shape, however many pending jobs have it (and a full read keeps sharing them), read
    from their placement records or (submitted before those were) from their manifests."""
    scheduler = SchedulerService(db, settings, now=Clock())
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        names = {}
        for name in ("big-a", "big-b", "small"):
            job = submit(session, queue, name, gpus=8 if name.startswith("big") else 1, pods=8, annotations={"n": name})
            if name == "big-b" and not recorded:
                job.placement_spec = None
            session.flush()
            names[str(job.id)] = name
    for _ in range(2):
        jobs = {names[job.id]: job for job in scheduler.read().pending}
        assert jobs["big-a"].spec.parts is jobs["big-b"].spec.parts
        assert jobs["big-a"].spec.parts != jobs["small"].spec.parts
        scheduler.pending.forget()


def test_a_split_job_back_with_a_part_still_held_is_decided_by_the_shape_of_the_parts_left(db, setup, settings):
    """Its workers still run; its eval part failed and is placed again alone. Jobs of one shape share the engine's
    answers: with the whole job's shape it would borrow the answers of jobs asking twice as much."""
    scheduler = SchedulerService(db, settings, now=Clock())
    with setup() as session:
        cluster = add_cluster(session, "eu-west", leaves=1)
        queue = add_queue(session)
        job = submit(session, queue, "pair", parts=(("workers", 1, 2, 8), ("eval", 1, 1, 4)),
                     annotations={"archipelago.io/placement": "split"})
        session.flush()
        for part, state in (("workers", "Running"), ("eval", "Failed")):
            session.add(Placement(job_id=job.id, part=part, cluster_id=cluster.id, cluster_name="eu-west",
                                  state=state, generation=1))
        whole = shape_of(parse_jobset(job.manifest))
    (pending,) = scheduler.read().pending
    assert [p.name for p in pending.spec.parts] == ["eval"]
    assert pending.shape == shape_of(pending.spec) != whole


def test_a_split_job_requeued_between_the_read_and_the_commit_is_not_admitted_with_the_parts_it_had(db, setup,
                                                                                                    settings):
    """The cycle read the job with its workers running and placed its eval part alone; before the commit, the
    workers failed and a status batch requeued it (still Queued). Admitted with eval alone, its workers would never
    be placed again: the commit leaves it, and the next cycle places both parts."""
    scheduler = SchedulerService(db, settings, now=Clock())
    with setup() as session:
        cluster = add_cluster(session, "eu-west", leaves=1)
        job = submit(session, add_queue(session), "pair", parts=(("workers", 1, 2, 8), ("eval", 1, 1, 4)),
                     annotations={"archipelago.io/placement": "split"})
        session.flush()
        for part, state in (("workers", "Running"), ("eval", "Failed")):
            session.add(Placement(job_id=job.id, part=part, cluster_id=cluster.id, cluster_name="eu-west",
                                  state=state, generation=1))
    inventory = scheduler.read()
    result = schedule(inventory.snapshot, inventory.pending, scheduler.config)
    assert [p.part for p in result.placements] == ["eval"]
    with setup() as session:
        session.execute(update(Placement).where(Placement.job_id == job.id, Placement.part == "workers")
                        .values(state="Failed"))
        session.execute(update(Job).where(Job.id == job.id).values(reason="workers on eu-west: failed; restarting"))
    outcome = commit_cycle(db, inventory, result)
    assert (outcome.admitted, outcome.dropped) == ([], [job.id])
    scheduler.pending.committed(inventory, result, outcome)
    assert scheduler.run_once().admitted == [job.id]
    with db.read() as session:
        assert sorted(session.scalars(select(Placement.part).where(Placement.job_id == job.id,
                                                                    Placement.state == "Decided"))) == [
            "eval", "workers"]


def test_a_capacity_read_builds_again_only_the_clusters_whose_inventory_changed(db, setup):
    """The submission check's capacity (`federation_capacity`, kept by the API's cache): a cluster whose nodes did
    not change keeps its index; one whose node grew is read and built again, and refuses no longer."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
        add_cluster(session, "us-east", leaves=1)
    known, sixteen = KnownClusters(), parse_jobset(job_manifest("big", (("workers", 1, 1, 16),), None, "q"))
    with db.read() as session:
        first = {index.name: index for index in federation_capacity(session, known).clusters}
    assert first.keys() == {"eu-west", "us-east"} and FederationCapacity(tuple(first.values())).refusal(
        sixteen, Config()) is not None
    with setup() as session:
        node = session.scalar(select(Node).where(Node.name == "us-east-leaf-0-n0"))
        node.allocatable = {**node.allocatable, GPU: 16_000}
    with db.read() as session:
        second = {index.name: index for index in federation_capacity(session, known).clusters}
    assert second["eu-west"] is first["eu-west"] and second["us-east"] is not first["us-east"]
    assert FederationCapacity(tuple(second.values())).refusal(sixteen, Config()) is None


def test_reading_the_clusters_steps_aside_between_clusters_and_every_few_nodes(db, setup):
    """Once every member's pods moved, the scheduler and the capacity cache read every node again: 8,000 in one
    stretch of 0.3 s or more in bench/leader_api.py, while the requests beside them waited. They pause
    (`broker.process.courtesy`) every NODES_BETWEEN_PAUSES nodes read, and before each cluster or index they build."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=2, nodes_per_leaf=NODES_BETWEEN_PAUSES)
        add_cluster(session, "us-east", leaves=1)
    nodes = 2 * NODES_BETWEEN_PAUSES + 4
    pauses = []
    with db.read() as session:
        KeptClusters().refresh(session, lambda: pauses.append("node"))
    assert len(pauses) == -(-nodes // NODES_BETWEEN_PAUSES) == 3
    pauses, known = [], KnownClusters()
    with db.read() as session:
        federation_capacity(session, known, lambda: pauses.append("capacity"))
    assert len(pauses) == 3 + 2 + 2  # the nodes, then each cluster built and its empty index
    pauses = []
    with db.read() as session:
        federation_capacity(session, known, lambda: pauses.append("capacity"))
    assert len(pauses) == 2  # nothing changed: no node read, no index built again
    kept = KeptClusters()
    with db.read() as session:
        kept.read(session, EPOCH.timestamp(), lambda: pauses.append("cycle"))
    assert pauses.count("cycle") == 3 + 2


def test_a_cluster_removed_and_another_registered_under_its_id_is_read_anew(db, setup, settings):
    """SQLite gives the highest id of a deleted row to the next insert: a cluster registered after the last one was
    removed may get its id, and as many inventory writes (its revision). Its nodes are its own, not the old ones."""
    scheduler = SchedulerService(db, settings.model_copy(update={"scheduler_resync_interval": 1e9}), now=Clock())
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1)
    scheduler.read()
    with setup() as session:
        old = session.scalar(select(Cluster).where(Cluster.name == "eu-west"))
        old_id, revision = old.id, old.inventory_revision
        session.delete(old)
    with setup() as session:
        new = add_cluster(session, "us-east", leaves=1)
    with setup() as session:
        new = session.get(Cluster, new.id)
        reused = (new.id, new.inventory_revision) == (old_id, revision)
    assert_same_as_a_full_read(db, scheduler)
    assert [n.name for n in scheduler.read().inputs[0]["us-east"].nodes][0].startswith("us-east-")
    if db.engine.dialect.name == "sqlite":  # the case this guards against did happen
        assert reused


def test_a_read_decodes_each_json_text_once_and_its_rows_share_the_value(db, setup, monkeypatch):
    """Nodes of one kind and jobs of one shape store the same JSON (allocatable, taints, waiting reasons): a full read
    decodes each text once, on both databases (PostgreSQL's JSONB read as text), and reads what is stored."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=2)
        tainted = add_cluster(session, "us-east", leaves=1)
        for node in tainted.nodes:
            node.taints = [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}]
            node.labels = {"pool": "h100"}
        queue = add_queue(session)
        jobs = [submit(session, queue, f"j{i}") for i in range(4)]
        session.flush()
        for job in jobs[:3]:
            job.reason, job.waiting_reasons = "no cluster can take it now", {"eu-west": "needs 8 GPUs; 0 GPUs free"}
    digested = []
    monkeypatch.setattr(scheduling_module, "stored_reasons_digest",
                        lambda stored: digested.append(stored) or scheduling_module.reasons_digest(
                            {c: r for r, clusters in (stored or {}).items() for c in clusters}))
    with db.read() as session:
        inventory = read_inventory(session, now=(EPOCH + timedelta(minutes=1)).timestamp())
    clusters = {cluster.name: cluster for cluster in inventory.inputs[0].values()}
    nodes = [node for cluster in clusters.values() for node in cluster.nodes]
    assert len({id(node.allocatable) for node in nodes}) == 1 and len({id(node.labels) for node in nodes}) == 2
    assert len({id(node.used) for node in nodes}) == 1
    assert len({id(node.taints[0]) for node in nodes if node.taints}) == 1
    assert [node.taints for node in clusters["us-east"].nodes] == [
        ({"key": "gpu", "value": "h100", "effect": "NoSchedule"},)] * 4 and clusters["eu-west"].nodes[0].taints == ()
    assert dict(nodes[0].allocatable) == {"cpu": 64_000, "memory": 512 * 2**30 * 1000, GPU: 8000}
    assert sorted(digested, key=len) == [{}, {"needs 8 GPUs; 0 GPUs free": ["eu-west"]}]  # 4 jobs, 2 texts
    waiting = [inventory.records[str(job.id)].reasons_digest for job in jobs]
    assert waiting[0] == waiting[1] == waiting[2] == scheduling_module.reasons_digest(
        {"eu-west": "needs 8 GPUs; 0 GPUs free"}) != waiting[3]
