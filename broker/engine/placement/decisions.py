"""What a cycle decides: placements, preemptions, and for every job left waiting, why.

These are plain frozen records: the commit step writes them to the inventory, the propagation
step turns a `Placement` into a JobSet on its member cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from broker.engine.placement.model import Resources, RunningPlacement


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """`pods` pods of ReplicatedJob `replicated_job` bound (in simulation) to `node`."""

    node: str
    replicated_job: str
    pods: int


@dataclass(frozen=True, slots=True)
class Placement:
    """One placement: the whole JobSet (`part` None) or one ReplicatedJob of a split JobSet."""

    job_id: str
    part: str | None
    cluster: str
    hypernode: str | None  # None: soft topology and the pods span HyperNodes
    tier: int | None
    assignments: tuple[NodeAssignment, ...]
    node_usage: Mapping[str, Resources]  # node -> resources the placement's pods take there
    exclusive_domains: tuple[tuple[str, str], ...] = ()  # (node label, value) held alone
    score: float = 0.0

    @property
    def node_pods(self) -> dict[str, int]:
        pods: dict[str, int] = {}
        for a in self.assignments:
            pods[a.node] = pods.get(a.node, 0) + a.pods
        return pods

    def node_names(self, replicated_job: str | None = None) -> tuple[str, ...]:
        return tuple(sorted({a.node for a in self.assignments
                             if replicated_job is None or a.replicated_job == replicated_job}))

    def as_running(self, *, tenant: str, queue: str, priority: int, started_at: float,
                   exclusive_topology: str | None = None, expected_end: float | None = None) -> RunningPlacement:
        """The record the next cycle's snapshot needs for this placement."""
        return RunningPlacement(job_id=self.job_id, part=self.part, cluster=self.cluster, hypernode=self.hypernode,
                                node_usage=self.node_usage, node_pods=MappingProxyType(self.node_pods),
                                tenant=tenant, queue=queue, priority=priority, started_at=started_at,
                                exclusive_topology=exclusive_topology, expected_end=expected_end)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict the running placement (`job_id`, `part`) on `cluster` so that `preemptor` fits."""

    job_id: str
    part: str | None
    cluster: str
    preemptor: str
    message: str  # why, for the victim's events: names the preemptor and the rule
    rule: str = ""  # WithinQueue | ReclaimWithinCohort | FairSharing


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a job stays queued: a summary, and one reason per cluster that was considered.

    `cause` is what the summary says, amounts aside ("quota", "capacity", …): while it stays, the job waits for the
    same thing, however its queue's usage and the clusters' free room rise and fall, and that is no news to it."""

    job_id: str
    message: str
    clusters: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cause: str = ""

    def lines(self) -> list[str]:
        return [self.message] + [f"{name}: {reason}" for name, reason in sorted(self.clusters.items())]


@dataclass(frozen=True, slots=True)
class Hold:
    """Nodes kept for one long-waiting job during one cycle: no other job is placed on them.

    The nodes of the HyperNode where the job would fit soonest (`hypernode` None: the nodes of the
    whole cluster, for a soft-topology job no HyperNode could hold); `free` is what was free on them.
    """

    job_id: str
    cluster: str
    hypernode: str | None
    tier: int | None
    nodes: tuple[str, ...]  # sorted
    free: Resources
    waiting_for: str  # the running work on them, at most what must end first: "32 GPUs"
    # when that work is expected to end: the reservation's start (EASY backfill's shadow time); None: unknown (some of
    # it says nothing of its end, or pods the broker did not place are there) — then nothing backfills there
    start: float | None = None

    def where(self) -> str:
        """"the 8 nodes a-n0..a-n7 of HyperNode leaf-3 on eu-west" """
        names = self.nodes
        listed = (f"node {names[0]}" if len(names) == 1 else f"nodes {names[0]}, {names[1]}" if len(names) == 2
                  else f"the {len(names)} nodes {names[0]}..{names[-1]}")
        domain = f"HyperNode {self.hypernode}" if self.hypernode else "the cluster"
        return f"{listed} of {domain} on {self.cluster}"


@dataclass(frozen=True, slots=True)
class CycleResult:
    placements: tuple[Placement, ...]
    preemptions: tuple[Preemption, ...]
    waiting: Mapping[str, Waiting]
    holds: Mapping[str, Hold]  # job id -> the nodes held for it this cycle (a job waiting too long)
    order: tuple[str, ...]  # job ids in the order they were decided
    # jobs that did not fit and cannot until capacity or quota is given back (`schedule`'s `parked`)
    inadmissible: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Parked:
    """Jobs a cycle found inadmissible (`CycleResult.inadmissible`), and what changed since that could make one fit."""

    jobs: frozenset[str] = frozenset()
    clusters: frozenset[str] = frozenset()  # capacity may have been given back there, or the cluster changed
    tenants: frozenset[str] = frozenset()  # their queues may hold less: quota given back
    held: Mapping[str, frozenset[str]] = field(default_factory=dict)  # cluster -> nodes its holds kept then


@dataclass(frozen=True, slots=True)
class ClusterVerdict:
    """A dry run's view of one cluster: its score if it could take the job, else why not."""

    cluster: str
    score: float | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DryRun:
    placements: tuple[Placement, ...]  # empty if the job would wait
    preemptions: tuple[Preemption, ...]
    waiting: Waiting | None
    clusters: tuple[ClusterVerdict, ...]
