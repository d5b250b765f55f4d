"""Generators for placement tests, in the style of Armada's testfixtures: small, composable, named.

    cluster("eu", fabric(leaves=4))            a cluster with 4 leaves of 8 GPU nodes, spines over 2 leaves
    n_jobs("research", 32, gpus=8)             32 single-pod jobs of 8 GPUs in queue research
    snapshot([cluster(...)], [queue(...)])     the snapshot a cycle runs on
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Iterable, Iterator

import pytest

from broker.engine.jobset import parse_jobset
from broker.engine.placement import Cluster, HyperNode, Node, PendingJob, Queue, RunningPlacement, Snapshot, Tenant
from broker.engine.placement.cycle import run as engine

GPU = "nvidia.com/gpu"
GiB = 2**30 * 1000  # memory in milli-units
_ids = itertools.count()


def node(name: str, gpus: int = 8, cpu: int = 64, memory_gib: int = 512, labels=None, taints=(),
         used_gpus: int = 0, unschedulable: bool = False) -> Node:
    allocatable = {"cpu": cpu * 1000, "memory": memory_gib * GiB}
    if gpus:
        allocatable[GPU] = gpus * 1000
    used = {GPU: used_gpus * 1000} if used_gpus else {}
    return Node(name, allocatable, used, labels or {}, tuple(taints), unschedulable)


def fabric(prefix: str = "", leaves: int = 4, nodes_per_leaf: int = 8, leaves_per_spine: int = 2,
           gpus: int = 8, node_labels=None) -> tuple[tuple[Node, ...], tuple[HyperNode, ...]]:
    """Three tiers as in examples/hypernodes-eu-west.yaml: leaf (1) < spine (2) < fabric (3)."""
    nodes, hypernodes = [], []
    spines = (leaves + leaves_per_spine - 1) // leaves_per_spine
    for s in range(spines):
        spine_leaves = [f"{prefix}leaf-{l}" for l in range(s * leaves_per_spine, min(leaves, (s + 1) * leaves_per_spine))]
        hypernodes.append(HyperNode(f"{prefix}spine-{s}", 2, f"{prefix}fabric", tuple(spine_leaves)))
        for leaf in spine_leaves:
            members = tuple(f"{leaf}-n{i}" for i in range(nodes_per_leaf))
            hypernodes.append(HyperNode(leaf, 1, f"{prefix}spine-{s}", (), members))
            for i, name in enumerate(members):
                labels = {"leaf": leaf, **(node_labels(leaf, i) if node_labels else {})}
                nodes.append(node(name, gpus=gpus, labels=labels))
    hypernodes.append(HyperNode(f"{prefix}fabric", 3, None, tuple(f"{prefix}spine-{s}" for s in range(spines))))
    return tuple(nodes), tuple(hypernodes)


def cluster(name: str, layout=None, state: str = "Ready", labels=None, taints=(), jobset_crd: bool = True) -> Cluster:
    nodes, hypernodes = layout if layout is not None else fabric()
    return Cluster(name, state, labels or {}, tuple(taints), jobset_crd, nodes, hypernodes)


def queue(name: str, tenant: str = "t", weight: float = 1.0, quota=None, borrow=None, preemption="Never",
          priority: int = 0, reclaim: str = "Never") -> Queue:
    return Queue(name, tenant, weight, priority, {GPU: g * 1000 for g in [quota] if g is not None},
                 None if borrow is None else {GPU: borrow * 1000}, preemption, reclaim)


def manifest(name: str = "job", parts=(("workers", 1, 1, 8),), annotations=None, queue_name: str = "q",
             cpu: int = 1, exclusive=None, tolerations=()) -> dict:
    """A JobSet manifest; each part is (name, replicas, parallelism, gpus per pod)."""
    replicated = []
    for part_name, replicas, parallelism, gpus in parts:
        resources = {"requests": {"cpu": str(cpu), "memory": "1Gi"}, "limits": {GPU: str(gpus)} if gpus else {}}
        template = {"spec": {"parallelism": parallelism, "template": {"spec": {
            "containers": [{"name": "c", "image": "x", "resources": resources}],
            "tolerations": list(tolerations)}}}}
        replicated.append({"name": part_name, "replicas": replicas, "template": template})
    meta_annotations = dict(annotations or {})
    if exclusive:
        meta_annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = exclusive
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue_name},
                         "annotations": meta_annotations},
            "spec": {"replicatedJobs": replicated}}


def job(queue_name: str = "q", gpus: int = 8, pods: int = 1, tenant: str = "t", priority: int = 0,
        submitted_at: float | None = None, job_id: str | None = None, annotations=None, parts=None,
        **manifest_args) -> PendingJob:
    number = next(_ids)
    job_id = job_id or f"{queue_name}-{number:05d}"
    spec = parse_jobset(manifest(job_id.lower().replace("_", "-"), parts or (("workers", 1, pods, gpus),),
                                 annotations, queue_name, **manifest_args))
    return PendingJob(job_id, tenant, queue_name, priority, float(number if submitted_at is None else submitted_at),
                      spec)


def n_jobs(queue_name: str, n: int, **kwargs) -> list[PendingJob]:
    return [job(queue_name, **kwargs) for _ in range(n)]


def hard(tier: int) -> dict:
    return {"archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": str(tier)}


def snapshot(clusters: Iterable[Cluster], queues: Iterable[Queue], running=(), now: float = 0.0,
             tenants: Iterable[Tenant] = ()) -> Snapshot:
    return Snapshot(clusters, queues, tenants, running, now)


def gpus_by_queue(placements, jobs) -> dict[str, int]:
    queue_of = {j.id: j.queue for j in jobs}
    totals: dict[str, int] = {}
    for p in placements:
        totals[queue_of[p.job_id]] = totals.get(queue_of[p.job_id], 0) + sum(
            u.get(GPU, 0) for u in p.node_usage.values()) // 1000
    return totals


def running(job_id, cluster_name, nodes, gpus_per_node=8, priority=0, started_at=0.0, queue_name="q", tenant="t"):
    return RunningPlacement(job_id, None, cluster_name, None, {n: {GPU: gpus_per_node * 1000} for n in nodes},
                            {n: 1 for n in nodes}, tenant, queue_name, priority, started_at)


class _KeepsNothing(dict):
    def __setitem__(self, key, value) -> None:
        pass

    def setdefault(self, key, default=None):
        return default


@contextmanager
def keeping_nothing(*memos: str) -> Iterator[None]:
    """Cycles made inside keep nothing in these memos (`_Cycle` attributes): they ask everything afresh, the
    reference a memo must match."""
    made = engine._Cycle.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        for memo in memos:
            setattr(self, memo, _KeepsNothing())

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(engine._Cycle, "__init__", init)
        yield
