"""A placement from a fit: the nodes it binds and what it uses there; a whole split job's placement cut into its
parts' placements."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from broker.engine.placement.decisions import NodeAssignment, Placement
from broker.engine.placement.model import PendingJob
from broker.engine.placement.plugins import Request
from broker.engine.placement.snapshot import ClusterIndex, Fit


def to_placement(request: Request, cluster: ClusterIndex, fit: Fit, score: float) -> Placement:
    binding = fit.binding
    assignments = tuple(NodeAssignment(cluster.nodes[i].name, part, pods)
                        for i in sorted(binding.pods) for part, pods in sorted(binding.pods[i].items()))
    usage = MappingProxyType({cluster.nodes[i].name: MappingProxyType(dict(u)) for i, u in sorted(binding.usage.items())})
    hypernode = fit.hypernode
    return Placement(job_id=request.job.id, part=request.part, cluster=cluster.name,
                     hypernode=hypernode.name if hypernode else None, tier=hypernode.tier if hypernode else None,
                     assignments=assignments, node_usage=usage, exclusive_domains=tuple(sorted(binding.domains)),
                     score=round(score, 6))


def per_part(placement: Placement, job: PendingJob, cluster: ClusterIndex) -> list[Placement]:
    """Cut a placement of a whole split job into its parts' placements, on the same nodes."""
    result = []
    for part in job.spec.parts:
        assignments = tuple(a for a in placement.assignments if a.replicated_job == part.name)
        usage = MappingProxyType({a.node: MappingProxyType({r: q * a.pods for r, q in part.pod_requests.items()})
                                  for a in assignments})
        label = part.exclusive_topology
        held = {cluster.nodes[cluster.position[a.node]].labels.get(label) for a in assignments} if label else set()
        domains = tuple(d for d in placement.exclusive_domains if d[0] == label and d[1] in held)
        result.append(replace(placement, part=part.name, assignments=assignments, node_usage=usage,
                              exclusive_domains=domains))
    return result
