"""How well placements respect topology, and the first-fit baseline they are compared with.

The benchmark and the quality tests replay the same trace through the engine and through
`first_fit` (Kubernetes-style: first cluster, first nodes with room, topology ignored) and report
the share of jobs that could fit in one tier-1 HyperNode and were placed in one.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Iterable

from broker.engine.placement.decisions import NodeAssignment, Placement
from broker.engine.placement.model import PendingJob
from broker.engine.placement.snapshot import Binding, Snapshot

_EXHAUSTIVE = 1 << 30


def fits_one_hypernode(snapshot: Snapshot, job: PendingJob, tier: int = 1) -> bool:
    """Could the whole job go into one HyperNode of tier ≤ `tier` of some Ready cluster it selects, right now?"""
    spec = job.spec
    return any(c.cluster.state == "Ready" and spec.cluster_selector.matches(c.cluster.labels)
               and c.search(spec.parts, spec.requests, tier, _EXHAUSTIVE, bind=True) is not None
               for c in snapshot.clusters.values())


def placed_in_one_hypernode(snapshot: Snapshot, placements: list[Placement], tier: int = 1) -> bool:
    """Do all the pods of these placements sit inside one HyperNode of tier ≤ `tier`?"""
    if not placements or len({p.cluster for p in placements}) != 1:
        return False
    cluster = snapshot.clusters[placements[0].cluster]
    nodes = {cluster.position[n] for p in placements for n in p.node_usage}
    common = None
    for i in nodes:
        names = {h.name for h in cluster.node_hypernodes[i] if h.tier <= tier}
        common = names if common is None else common & names
    return bool(common)


def first_fit(snapshot: Snapshot, job: PendingJob) -> list[Placement]:
    """Place the whole job on the first Ready cluster whose nodes, taken in order, hold it; apply it."""
    for cluster in snapshot.clusters.values():
        if cluster.cluster.state != "Ready" or not cluster.cluster.jobset_crd:
            continue
        binding = Binding({}, {}, [])
        for part in job.spec.parts:
            eligible = cluster.eligible(part)
            remaining = part.pods
            for i in range(len(cluster.nodes)):
                if not remaining:
                    break
                room = min(cluster.room(i, part.pod_requests, binding.usage), remaining) if eligible[i] else 0
                if room:
                    used = binding.usage.setdefault(i, {})
                    for resource, amount in part.pod_requests.items():
                        used[resource] = used.get(resource, 0) + amount * room
                    binding.pods.setdefault(i, {})[part.name] = room
                    remaining -= room
            if remaining:
                break
        else:
            placement = Placement(
                job.id, None, cluster.name, None, None,
                tuple(NodeAssignment(cluster.nodes[i].name, part, n) for i in sorted(binding.pods)
                      for part, n in sorted(binding.pods[i].items())),
                MappingProxyType({cluster.nodes[i].name: MappingProxyType(u) for i, u in binding.usage.items()}))
            snapshot.occupy(cluster.name, job.queue, placement.node_usage, placement.node_pods, None, +1)
            return [placement]
    return []


def replay(snapshot: Snapshot, trace: Iterable[tuple[PendingJob, int]],
           place: Callable[[Snapshot, PendingJob], list[Placement]]) -> tuple[int, int]:
    """Online replay of (job, lifetime in steps), one job a step, each releasing its nodes when its
    lifetime ends. Returns how many jobs could fit one tier-1 HyperNode when they came, and how many of
    those `place` put in one."""
    active: list[tuple[int, list[Placement], str]] = []
    eligible = in_one = 0
    for step, (job, lifetime) in enumerate(trace):
        for _, placements, queue in [a for a in active if a[0] <= step]:
            for p in placements:
                snapshot.occupy(p.cluster, queue, p.node_usage, p.node_pods, None, -1)
        active = [a for a in active if a[0] > step]
        could = fits_one_hypernode(snapshot, job, tier=1)
        placements = place(snapshot, job)
        if could:
            eligible += 1
            in_one += placed_in_one_hypernode(snapshot, placements, tier=1)
        if placements:
            active.append((step + lifetime, placements, job.queue))
    return eligible, in_one
