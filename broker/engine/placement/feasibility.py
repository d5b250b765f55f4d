"""Could a JobSet ever run? The submission check, made of placement's own filters and gang search.

"Ever" means: on some registered cluster as it is registered — its labels and taints, its nodes'
labels, taints and allocatable — once it is Ready, has the JobSet CRD, and is empty, with every node
schedulable. A cluster that is NotReady, Cordoned, Draining or without the CRD now, or a node that is
cordoned or NotReady now (and the `node.kubernetes.io/` taints its conditions bring), may come back,
so none of these refuses a job; they make it wait, with reasons. What refuses it: a cluster selector
no cluster's labels match, a taint it does not tolerate, no node its selector, affinity and
tolerations admit, a demand larger than an empty cluster, a gang no HyperNode of the allowed tiers
can hold. A cluster whose nodes were never read is given the benefit of the doubt on capacity.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Iterable, Mapping

from broker.engine.jobset import PlacementSpec
from broker.engine.placement.cycle import Config
from broker.engine.placement.explain import amount, pods_phrase
from broker.engine.placement.model import Cluster, PendingJob
from broker.engine.placement.plugins import FILTERS, Request
from broker.engine.placement.snapshot import ClusterIndex
from clusters.rules.taints import lasting

_EVERY_CANDIDATE = 1 << 30


def empty(cluster: Cluster) -> ClusterIndex:
    """The cluster as it could be: Ready, JobSet CRD installed, every node schedulable and idle."""
    nodes = tuple(replace(n, used=MappingProxyType({}), unschedulable=False, taints=lasting(n.taints))
                  for n in cluster.nodes)
    return ClusterIndex(replace(cluster, state="Ready", jobset_crd=True, nodes=nodes))


def never_fits(clusters: Iterable[ClusterIndex], spec: PlacementSpec, config: Config = Config()) -> Mapping[str, str]:
    """Per cluster (from `empty`), why the job could never run there; empty when some cluster could
    take it (a `split` job: each part on some cluster, or all of them on one)."""
    clusters = list(clusters)
    job = PendingJob("submission", "", "", 0, 0.0, spec)  # pragma: no mutate (a probe: its identity shows nowhere)
    filters = [FILTERS[name]() for name in config.filters]
    whole = Request(job, None, spec.parts, spec.requests, spec.tier_bound)
    reasons = _reasons(whole, clusters, filters)
    if not reasons or spec.placement == "whole":
        return reasons
    for part in spec.parts:
        part_reasons = _reasons(Request(job, part.name, (part,), part.requests, spec.tier_bound), clusters, filters)
        if part_reasons:
            return {name: f"{part.name}: {why}" for name, why in part_reasons.items()}
    return {}


def _reasons(request: Request, clusters: list[ClusterIndex], filters: list) -> dict[str, str]:
    reasons = {}
    for cluster in clusters:
        known = bool(cluster.nodes)
        reason = next((why for f in filters if known or not f.depends_on_capacity
                       if (why := f.filter(request, cluster))), None)
        if reason is None and known and cluster.search(request.parts, request.demand, request.bound,
                                                       _EVERY_CANDIDATE, bind=True) is None:
            reason = _cannot_hold(request, cluster)
        if reason is None:
            return {}
        reasons[cluster.name] = reason
    return reasons


def _cannot_hold(request: Request, cluster: ClusterIndex) -> str:
    part = max(request.parts, key=lambda p: p.pods)
    what = pods_phrase(part.pods, part.pod_requests, cluster.scarcest(part), part.devices)
    if request.bound is not None:
        return (f"even empty, no HyperNode of tier {request.bound} or lower can hold "
                f"{amount(request.primary, request.need)} as {what} on its nodes")
    return f"even empty, its nodes cannot hold {what}"
