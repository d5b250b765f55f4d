"""The filters whose answers no decision changes (cluster state, JobSet CRD, avoided clusters, cluster selector,
taints, node eligibility) are asked once a cycle for each kind of request they read (`plugins.FilterPlugin.fixed`:
its cluster selector, its parts' names and node constraints, the clusters the job avoids): a cycle decides and
explains exactly as one that keeps nothing, whatever the clusters' labels, taints and states, the jobs' selectors,
tolerations, avoided clusters and split parts. Then one named case per part of the memo's key."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from broker.engine.jobset import parse_jobset
from broker.engine.placement import PendingJob, Snapshot, Tenant, schedule, shape_of
from tests.placement.fixtures import cluster, fabric, job, keeping_nothing, manifest, queue

TAINT = {"key": "gpu", "value": "h100", "effect": "NoSchedule"}
TOLERATES = {"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}
QUEUES = [queue("q", tenant="t1"), queue("r", tenant="t2")]


def federation(rnd: random.Random) -> Snapshot:
    clusters = []
    for name in ("a", "b", "c", "d"):
        clusters.append(cluster(name, fabric(f"{name}-", leaves=rnd.choice([1, 2]), nodes_per_leaf=2),
                                state=rnd.choice(["Ready", "Ready", "Ready", "Cordoned"]),
                                labels={"region": rnd.choice(["eu", "us"])},
                                taints=(TAINT,) if rnd.random() < 0.3 else ()))
    return Snapshot(clusters, QUEUES, (Tenant("t1"), Tenant("t2")), (), 60.0)


def arrival(rnd: random.Random, i: int) -> PendingJob:
    tolerations = [TOLERATES] if rnd.random() < 0.5 else []
    split = rnd.random() < 0.3
    parts = (("workers", 1, rnd.choice([1, 2]), rnd.choice([4, 8])), ("eval", 1, 1, rnd.choice([2, 8])))
    annotations = {"archipelago.io/placement": "split"} if split else {}
    if rnd.random() < 0.3:
        annotations["archipelago.io/cluster-selector"] = f"region={rnd.choice(['eu', 'us'])}"
    queue_name = rnd.choice(QUEUES).name
    pending = job(queue_name, gpus=rnd.choice([4, 8]), pods=rnd.choice([1, 2]), tenant={"q": "t1", "r": "t2"}[
        queue_name], submitted_at=float(i), parts=parts if split else None, annotations=annotations,
                  tolerations=tolerations)
    avoided = {rnd.choice("abcd"): "2026-12-01T10:00:00Z"} if rnd.random() < 0.2 else {}
    return replace(pending, avoided=avoided)


def explained(result) -> tuple:
    return (sorted((p.job_id, p.part or "", p.cluster, p.assignments) for p in result.placements),
            sorted((w.job_id, w.message, tuple(sorted(w.clusters.items()))) for w in result.waiting.values()))


@pytest.mark.parametrize("seed", range(40))
def test_a_cycle_decides_and_explains_as_one_that_keeps_nothing(seed):
    rnd = random.Random(seed)
    snapshot_seed, jobs = rnd.random(), [arrival(rnd, i) for i in range(16)]
    shaped = [replace(j, shape=shape_of(j.spec)) for j in jobs]
    kept = schedule(federation(random.Random(snapshot_seed)), shaped)
    with keeping_nothing("fixed_reasons", "estimates", "unplaced"):
        afresh = schedule(federation(random.Random(snapshot_seed)), shaped)
    assert explained(kept) == explained(afresh)


def shaped(pending: PendingJob, **changes) -> PendingJob:
    return replace(pending, shape=shape_of(pending.spec), **changes)


def test_a_job_of_a_shape_avoiding_a_cluster_does_not_keep_the_next_of_its_shape_off_it():
    """Only a has room, for one job; the first job of the shape avoids a, the second does not: it goes there."""
    snapshot = Snapshot([cluster("a", fabric("a-", leaves=1, nodes_per_leaf=1))], QUEUES, (), (), 60.0)
    avoiding = shaped(job("q", gpus=8, tenant="t1", submitted_at=1.0), avoided={"a": "2026-12-01T10:00:00Z"})
    after = shaped(job("q", gpus=8, tenant="t1", submitted_at=2.0))
    result = schedule(snapshot, [avoiding, after])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(after.id, "a")]
    assert result.waiting[avoiding.id].clusters["a"].startswith("its pods did not all become ready here")


def test_each_part_of_a_split_job_is_filtered_on_its_own_tolerations():
    """a is tainted and only its nodes can hold the 4 workers, which tolerate the taint; eval does not, and goes to
    b. Whole, the job passes neither; split, workers to a and eval to b."""
    body = manifest("split", parts=(("workers", 1, 4, 8), ("eval", 1, 1, 8)),
                    annotations={"archipelago.io/placement": "split"})
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["tolerations"] = [TOLERATES]
    pending = job("q", tenant="t1")
    pending = shaped(replace(pending, spec=parse_jobset(body)))
    snapshot = Snapshot([cluster("a", fabric("a-", leaves=1, nodes_per_leaf=4), taints=(TAINT,)),
                         cluster("b", fabric("b-", leaves=1, nodes_per_leaf=1))], QUEUES, (), (), 60.0)
    result = schedule(snapshot, [pending])
    assert sorted((p.part, p.cluster) for p in result.placements) == [("eval", "b"), ("workers", "a")]


def test_a_job_that_tolerates_a_taint_is_not_kept_off_by_one_that_does_not():
    """Only a, tainted, has room; the first job does not tolerate the taint and waits, the second (same selector and
    part names) tolerates it and goes there."""
    snapshot = Snapshot([cluster("a", fabric("a-", leaves=1, nodes_per_leaf=1), taints=(TAINT,))], QUEUES, (), (), 60.0)
    intolerant = job("q", gpus=8, tenant="t1", submitted_at=1.0)
    tolerant = job("q", gpus=4, tenant="t1", submitted_at=2.0, tolerations=[TOLERATES])
    result = schedule(snapshot, [intolerant, tolerant])
    assert [(p.job_id, p.cluster) for p in result.placements] == [(tolerant.id, "a")]
    assert result.waiting[intolerant.id].clusters["a"] == "has taint gpu=h100:NoSchedule that workers does not tolerate"


def test_a_reason_names_the_jobs_own_part():
    """Two jobs alike but for their parts' names, on a tainted cluster: each reason names its own part."""
    snapshot = Snapshot([cluster("a", fabric("a-", leaves=1, nodes_per_leaf=1), taints=(TAINT,))], QUEUES, (), (), 60.0)
    workers = job("q", gpus=8, tenant="t1", submitted_at=1.0)
    trainer = job("q", tenant="t1", submitted_at=2.0, parts=(("trainer", 1, 1, 8),))
    result = schedule(snapshot, [workers, trainer])
    assert [result.waiting[j.id].clusters["a"].split(" that ")[1] for j in (workers, trainer)] == [
        "workers does not tolerate", "trainer does not tolerate"]
