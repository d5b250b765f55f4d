"""Filter and score plugins, after Karmada's scheduler framework.

A filter looks at one request and one cluster and returns None (the cluster may take it) or a
reason in words a tenant understands. A `fixed` filter reads only the request's shape, the clusters
the job avoids, and what no decision changes (the cluster's state, labels, taints and nodes), so a
cycle asks it once per shape. A score rates a cluster that passed every filter from 0 to
100; the cycle sums the enabled scores by their weights. Plugins are looked up by name, so the
settings layer enables and weights them with plain strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from broker.engine.jobset import EXPECTED_RUNTIME_ANNOTATION, PartSpec
from broker.engine.placement.decisions import Hold
from broker.engine.placement.explain import amount, moment, shortfall
from broker.engine.placement.model import PendingJob, Resources
from broker.engine.placement.snapshot import ClusterIndex, HyperNodeState, primary_resource
from clusters.rules.dra import CLASS_PREFIX, DEMAND_PREFIX
from clusters.rules.pod_security import is_control_plane
from clusters.rules.quantity import add_into
from clusters.rules.taints import describe_taint, untolerated


@dataclass(slots=True)
class HeldNodes:
    """The holds on one cluster in this cycle, and the free capacity they took out of it."""

    holds: list[Hold] = field(default_factory=list)
    free: dict[str, int] = field(default_factory=dict)
    # the Reservation filter's answers until the next hold: (resource, need, free or -bound) -> reason
    reasons: dict[tuple, str | None] = field(default_factory=dict)

    def add(self, hold: Hold) -> None:
        self.holds.append(hold)
        add_into(self.free, hold.free)
        self.reasons.clear()


@dataclass(slots=True)
class Request:
    """What one placement asks for: all parts of a whole JobSet, or one part of a split one."""

    job: PendingJob
    part: str | None
    parts: tuple[PartSpec, ...]
    demand: Resources
    bound: int | None  # highest HyperNode tier allowed (hard topology), None for soft
    holds: Mapping[str, HeldNodes] = field(default_factory=dict)  # cluster -> nodes held for long-waiting jobs
    clusters_used: frozenset[str] = frozenset()  # by other parts of the same split job

    @property
    def primary(self) -> str:
        return primary_resource(self.demand)

    @property
    def need(self) -> int:
        """How much of its primary resource it asks for (0: a pod that asks for no CPU nor GPU)."""
        return self.demand.get(self.primary, 0)


@dataclass(slots=True)
class Candidate:
    cluster: ClusterIndex
    hypernode: HyperNodeState | None


class FilterPlugin(Protocol):
    name: str
    depends_on_capacity: bool  # skipped when asking "would it fit after preemption?"
    # its answer follows from the job's cluster selector, its request's parts' names and node constraints
    # (`eligibility_key`), the clusters the job avoids, and the cluster's facts: asked once a cycle for each of those
    fixed: bool

    def filter(self, request: Request, cluster: ClusterIndex) -> str | None: ...


class ScorePlugin(Protocol):
    name: str

    def score(self, request: Request, candidate: Candidate) -> float: ...


class ClusterState:
    name, depends_on_capacity, fixed = "ClusterState", False, True
    _WORDS = {"Cordoned": "cordoned", "Draining": "draining", "NotReady": "not ready (not answering)",
              "Pending": "not yet connected"}

    def filter(self, request, cluster):
        state = cluster.cluster.state
        return None if state == "Ready" else self._WORDS.get(state, f"in state {state}")


class JobSetCRD:
    name, depends_on_capacity, fixed = "JobSetCRD", False, True

    def filter(self, request, cluster):
        return None if cluster.cluster.jobset_crd else "has no JobSet CRD installed"


class ClusterSelector:
    name, depends_on_capacity, fixed = "ClusterSelector", False, True

    def filter(self, request, cluster):
        selector = request.job.spec.cluster_selector
        return None if selector.matches(cluster.cluster.labels) else f"labels do not match the cluster selector {selector}"


class TaintToleration:
    name, depends_on_capacity, fixed = "TaintToleration", False, True

    def filter(self, request, cluster):
        for part in request.parts:
            blocking = untolerated(cluster.cluster.taints, part.tolerations)
            if blocking:
                return f"has taint {describe_taint(blocking[0])} that {part.name} does not tolerate"
        return None


class NodeEligibility:
    """Some node must take a pod of each part: schedulable, its taints tolerated, the pod's node
    selector and required node affinity matched (room on it is the search's to find). It reads the
    nodes, so where they are not known yet (the submission check) it is not asked."""

    name, depends_on_capacity, fixed = "NodeEligibility", True, True

    def filter(self, request, cluster):
        for part in request.parts:
            if not cluster.eligible_count(part):
                return f"no node can take a pod of {part.name}: {_why_no_node(part, cluster)}"
        return None


def _why_no_node(part: PartSpec, cluster: ClusterIndex) -> str:
    """Per node the first thing that keeps the pod off, counted, as the kube-scheduler reports it."""
    if not cluster.nodes:
        return "it has no nodes"
    counts: dict[str, int] = {}
    for node in cluster.nodes:
        blocking = untolerated(node.taints, part.tolerations)
        if node.unschedulable:
            why = "cordoned or not ready"
        elif is_control_plane(node.labels) and not part.control_plane:
            why = "are control-plane nodes, which only a privileged tenant's pods may use"
        elif not part.may_run_on(node.name, node.labels):
            why = "do not match its node selector or required node affinity"
        else:
            why = f"have taint {describe_taint(blocking[0])} it does not tolerate"
        counts[why] = counts.get(why, 0) + 1
    return ", ".join(f"{n} of {len(cluster.nodes)} nodes {why}" for why, n in sorted(counts.items()))


class Reservation:
    """Nodes held for a job that has waited too long are not free for others.

    Their free capacity is already taken out of the snapshot, so this filter only says so when the
    holds are what stops the request: its main resource (GPUs, else CPUs) would be free enough, in
    the cluster or in one HyperNode of tier ≤ its bound for hard topology, if the held nodes were.
    """

    name, depends_on_capacity, fixed = "Reservation", True, False

    def filter(self, request, cluster):
        held = request.holds.get(cluster.name)
        if held is None:
            return None
        resource, need = request.primary, request.need
        if request.bound is None:
            free = cluster.free_total.get(resource, 0)
            if free >= need or free + held.free.get(resource, 0) < need:
                return None  # the holds are not what stops it
            key = (resource, need, free)
        else:
            if cluster.largest_free(resource, request.bound) >= need:
                return None
            key = (resource, need, -request.bound)
        if key not in held.reasons:
            held.reasons[key] = self._explain(held, cluster, resource, need, request.bound, key[2])
        return held.reasons[key]

    @staticmethod
    def _explain(held, cluster, resource, need, bound, free) -> str | None:
        if bound is None:
            return f"needs {amount(resource, need)}; {amount(resource, free)} free outside {_held_for(held.holds)}"
        blocking = [h for h in held.holds if h.tier is not None and h.tier <= bound
                    and cluster.hypernodes[h.hypernode].free.get(resource, 0) + h.free.get(resource, 0) >= need]
        return f"needs {amount(resource, need)} in one tier-{bound} HyperNode; {_held_for(blocking)}" if blocking else None


def _held_for(holds: Sequence[Hold]) -> str:
    """"the 8 nodes … of HyperNode leaf-0 on eu, held for a job that has waited too long", and how many more (the
    job not named: it may be another tenant's)."""
    first = f"{holds[0].where()}, held for a job that has waited too long"
    if holds[0].start is not None:
        first += (f" from about {moment(holds[0].start)} (a job whose {EXPECTED_RUNTIME_ANNOTATION} ends by then may use "
                  f"{'it' if len(holds[0].nodes) == 1 else 'them'})")
    others = len(holds) - 1
    return first if not others else f"{first}, and nodes held for {others} other job{'s' if others > 1 else ''}"


class Capacity:
    name, depends_on_capacity, fixed = "Capacity", True, False

    def filter(self, request, cluster):
        short = shortfall(request.demand, cluster.free_total)
        if short is None:
            return None
        resource, needed, free = short
        if resource.startswith(DEMAND_PREFIX):  # a pod device demand (DRA claims): counted in pods, said in devices
            words = next(p.devices for p in request.parts if resource in p.pod_requests)
            return (f"needs {words} per pod for {needed // 1000} pod{'s' if needed != 1000 else ''}; its free devices "
                    f"have room for {free // 1000}")
        if resource.startswith(CLASS_PREFIX):
            return (f"needs {needed // 1000} {resource[len(CLASS_PREFIX):]} devices; its nodes have "
                    f"{free // 1000} free")
        return f"needs {amount(resource, needed)}; {amount(resource, free)} free"


class ExclusiveTopology:
    name, depends_on_capacity, fixed = "ExclusiveTopology", True, False

    def filter(self, request, cluster):
        for part in request.parts:
            if part.exclusive_topology:
                free = len(cluster.free_domains(part))
                if free < part.replicas:
                    return (f"{part.name} needs {part.replicas} free {part.exclusive_topology} domains with room for "
                            f"{part.parallelism} pods each; {free} {'is' if free == 1 else 'are'} free")
        return None


class TopologyBound:
    name, depends_on_capacity, fixed = "TopologyBound", True, False

    def filter(self, request, cluster):
        if request.bound is None:
            return None
        if not any(t <= request.bound for t in cluster.tiers):
            return f"has no HyperNode of tier {request.bound} or lower"
        resource = request.primary
        largest = cluster.largest_free(resource, request.bound)
        if largest < request.need:
            return (f"needs {amount(resource, request.need)} in one tier-{request.bound} HyperNode; "
                    f"the largest free one has {amount(resource, largest).split()[0]}")
        return None


class RecentEviction:
    name, depends_on_capacity, fixed = "RecentEviction", False, True

    def filter(self, request, cluster):
        until = request.job.avoided.get(cluster.name)
        if until is not None:
            return f"its pods did not all become ready here within the startup timeout; avoided until {until}"
        return None


class MemberAdmission:
    """A member whose admission refused the job's copy (its validation, a webhook, a policy, a quota): the job goes
    elsewhere, in the member's own words here."""

    name, depends_on_capacity, fixed = "MemberAdmission", False, True

    def filter(self, request, cluster):
        refusal = request.job.refused.get(cluster.name)
        return f"its admission refused the JobSet: {refusal}" if refusal is not None else None


class TightestTier:
    """Prefer the lowest tier (tier 1 = 100, tier 2 = 50, ...; spanning HyperNodes = 0)."""

    name = "TightestTier"

    def score(self, request, candidate):
        return 100.0 / candidate.hypernode.tier if candidate.hypernode else 0.0


class BinPacking:
    """Prefer the domain the gang fills best, leaving the fewest fragments behind."""

    name = "BinPacking"

    def score(self, request, candidate):
        domain = candidate.hypernode
        free = domain.free if domain else candidate.cluster.free_total
        total = domain.allocatable if domain else candidate.cluster.allocatable_total
        resource = request.primary
        if not total.get(resource):
            return 0.0
        left = free.get(resource, 0) - request.need
        return 100.0 * (1 - left / total[resource])


class Spread:
    """Prefer emptier clusters, and for a split job clusters its other parts do not use."""

    name = "Spread"

    def score(self, request, candidate):
        cluster, resource = candidate.cluster, request.primary
        total = cluster.allocatable_total.get(resource)
        emptiness = cluster.free_total.get(resource, 0) / total if total else 0.0
        apart = 0.0 if cluster.name in request.clusters_used else 1.0
        return 50.0 * emptiness + 50.0 * apart


class Locality:
    """Prefer a cluster the job ran on before (restarts, cached data)."""

    name = "Locality"

    def score(self, request, candidate):
        return 100.0 if candidate.cluster.name in request.job.previous_clusters else 0.0


FILTERS: dict[str, type] = {p.name: p for p in (
    ClusterState, JobSetCRD, ClusterSelector, TaintToleration, NodeEligibility, Reservation, Capacity, ExclusiveTopology,
    TopologyBound, RecentEviction, MemberAdmission)}
SCORES: dict[str, type] = {p.name: p for p in (TightestTier, BinPacking, Spread, Locality)}
