"""The inputs of a scheduling cycle: immutable records the snapshot builder fills from the inventory.

Resource amounts are integers in milli-units (`clusters.rules.quantity.to_milli`): "4" cpu is 4000,
one GPU is 1000, memory is bytes × 1000. Keys are Kubernetes resource names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from broker.engine.jobset import PlacementSpec

Resources = Mapping[str, int]
GPU = "nvidia.com/gpu"

CLUSTER_STATES = ("Pending", "Ready", "NotReady", "Cordoned", "Draining")
PREEMPTION_POLICIES = ("Never", "LowerPriority")  # within the queue (Kueue's withinClusterQueue)
RECLAIM_POLICIES = ("Never", "LowerPriority", "Any")  # from the cohort's borrowers (Kueue's reclaimWithinCohort)
# across tenants (Kueue's fair sharing preemption strategy)
FAIR_SHARE_PREEMPTION_POLICIES = ("Never", "LessThanOrEqualToFinalShare")


_NOTHING: Mapping = MappingProxyType({})


def no_pause() -> None:
    """What a snapshot and a cycle call between steps when nobody asks them to step aside (`schedule`'s `pause`)."""


def _empty() -> Mapping:
    """One read-only empty mapping for every default: 100,000 pending jobs need not carry 100,000 of them."""
    return _NOTHING


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    # What other workloads (daemon sets, pods the broker did not place) hold on the node. The pods
    # of the broker's own placements are NOT included: they come from `RunningPlacement.node_usage`.
    used: Resources = field(default_factory=_empty)
    labels: Mapping[str, str] = field(default_factory=_empty)
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class HyperNode:
    """A network domain (Volcano HyperNode): `nodes` are its direct member nodes, `children` its member HyperNodes."""

    name: str
    tier: int
    parent: str | None = None
    children: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cluster:
    name: str
    state: str = "Ready"  # one of CLUSTER_STATES; only Ready clusters take new work
    labels: Mapping[str, str] = field(default_factory=_empty)
    taints: tuple[Mapping[str, Any], ...] = ()
    jobset_crd: bool = True
    nodes: tuple[Node, ...] = ()
    hypernodes: tuple[HyperNode, ...] = ()


@dataclass(frozen=True, slots=True)
class Tenant:
    """`weight`: its part of the federation against the other tenants' (its queues share that part).
    `fair_share_preemption` (one of FAIR_SHARE_PREEMPTION_POLICIES): `LessThanOrEqualToFinalShare` lets its
    jobs preempt other tenants' work while it ends within its fair share and they end at or above theirs."""

    name: str
    weight: float = 1.0
    fair_share_preemption: str = "Never"


@dataclass(frozen=True, slots=True)
class Queue:
    """A tenant's queue. Resources absent from `nominal_quota` are not limited by quota.

    A queue may use its nominal quota plus what the other queues of its tenant (its cohort) leave
    unused, up to `borrowing_limit` per resource (absent resource or None: no limit on borrowing).
    Its nominal quota is a guarantee: a job that fits within it may take back, per
    `reclaim_within_cohort`, what other queues of the cohort borrowed (`LowerPriority`: their
    lower-priority work; `Any`: any of it). `preemption` is what it may do within itself
    (`LowerPriority`: a job preempts the queue's own lower-priority work).
    """

    name: str
    tenant: str
    weight: float = 1.0
    priority: int = 0
    nominal_quota: Resources = field(default_factory=_empty)
    borrowing_limit: Resources | None = None
    preemption: str = "Never"  # one of PREEMPTION_POLICIES
    reclaim_within_cohort: str = "Never"  # one of RECLAIM_POLICIES


@dataclass(frozen=True, slots=True)
class RunningPlacement:
    """A live part of a job the broker placed: on its way to its member, there, or being deleted from it."""

    job_id: str
    part: str | None  # None: the whole JobSet; else the ReplicatedJob name (split mode)
    cluster: str
    hypernode: str | None
    node_usage: Mapping[str, Resources]  # node name -> resources its pods of this placement hold
    node_pods: Mapping[str, int]  # node name -> number of pods
    tenant: str
    queue: str
    priority: int
    started_at: float
    exclusive_topology: str | None = None  # node label whose domains this placement holds alone
    # False once the broker gave the placement up (its copy is being deleted): its nodes stay held
    # until the member confirms, but it no longer counts toward its queue's quota, nor can it be preempted.
    charged: bool = True
    # when its job is expected to end (same clock), by what it declared or its Jobs' deadlines; None: unknown
    expected_end: float | None = None


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: str
    tenant: str  # its queue's tenant (a tenant submits to its own queues)
    queue: str
    priority: int  # resolved from the priority class; higher goes first
    submitted_at: float  # seconds, same clock as `Snapshot.now`
    spec: PlacementSpec
    previous_clusters: tuple[str, ...] = ()  # where it ran before (restarts, data locality)
    # clusters it was evicted from because its pods did not become ready in time -> until when (for people)
    avoided: Mapping[str, str] = field(default_factory=_empty)
    # members whose admission refused its copy (a dry run or an apply answered 4xx) -> the member's words
    refused: Mapping[str, str] = field(default_factory=_empty)
    # `shape_of(spec)`, when the caller computed it: jobs of one shape fit or not alike (a cycle's memo)
    shape: str | None = None
    # how long it is expected to run (seconds), by what it declared or its Jobs' deadlines: None, unknown. A job that
    # says may use nodes held for a starving one when it is expected to end before their reservation starts
    runtime: float | None = None
    # its place in its queue: 1. priority (higher first), 2. submission time, 3. id — made once, not every cycle
    # (100,000 keys a cycle were a fifth of a scheduler's time holding the GIL)
    queue_order: tuple[int, float, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queue_order", (-self.priority, self.submitted_at, self.id))


QUEUE_ORDER = attrgetter("queue_order")


class Backlog:
    """Pending jobs by queue, each queue's in its order (`PendingJob.queue_order`), as a cycle takes them. Whoever
    keeps the jobs between cycles keeps them so (`broker.store.scheduling.PendingJobs`): a cycle over 100,000 of them then
    groups and sorts none (that was 0.1 s of every cycle). Iterating gives every job, queue by queue."""

    __slots__ = ("queues",)

    def __init__(self, queues: Mapping[str, Sequence[PendingJob]]) -> None:
        self.queues = queues  # queue name -> its jobs in queue order; a cycle reads them, never changes them

    @classmethod
    def of(cls, jobs: Iterable[PendingJob]) -> Backlog:
        queues: dict[str, list[PendingJob]] = {}
        for job in jobs:
            listed = queues.setdefault(job.queue, [])
            if listed and listed[0].tenant != job.tenant:
                raise ValueError(f"jobs {listed[0].id} and {job.id} of queue {job.queue} belong to tenants "
                                 f"{listed[0].tenant} and {job.tenant}: a queue holds one tenant's jobs")
            listed.append(job)
        for listed in queues.values():
            listed.sort(key=QUEUE_ORDER)
        return cls(queues)

    def __iter__(self) -> Iterator[PendingJob]:
        return chain.from_iterable(self.queues.values())


def shape_of(spec: PlacementSpec) -> str:
    """Everything of a JobSet that the filters and the search read, and nothing else (not its name, labels or
    annotations): equal for two JobSets only if they fit or not alike, on any cluster."""
    return repr((spec.parts, spec.cluster_selector, spec.placement, spec.tier_bound))
