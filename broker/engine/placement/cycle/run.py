"""The cycle itself: `_Cycle` holds one cycle's state over one snapshot and runs its phases (`run`); `schedule` and
`dry_run` are the engine's two ways in."""

from __future__ import annotations

import heapq
from operator import attrgetter
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from broker.engine.placement.cycle.config import Config
from broker.engine.placement.cycle.decide import Deciding, Line
from broker.engine.placement.cycle.hold import Holding
from broker.engine.placement.cycle.order import QueueOrder
from broker.engine.placement.cycle.parked import Parking
from broker.engine.placement.cycle.preempt import Preempting
from broker.engine.placement.decisions import (ClusterVerdict, CycleResult, DryRun, Hold, Parked, Placement, Preemption,
                                               Waiting)
from broker.engine.placement.fairness import QuotaVerdict, check_quota, tenant_fair_shares
from broker.engine.placement.model import Backlog, PendingJob, no_pause
from broker.engine.placement.plugins import FILTERS, SCORES, Candidate, HeldNodes, Request
from broker.engine.placement.snapshot import ClusterIndex, Snapshot

TENANT = attrgetter("tenant")


class _Cycle(QueueOrder, Parking, Deciding, Preempting, Holding):
    """One cycle over one snapshot. Its phases are written in modules of their own (queue order, parked jobs, the
    decision of one job, preemption, holds) as parts of this class: they share the state set here, and one cycle is
    one object, as Kueue's scheduler is."""

    def __init__(self, snapshot: Snapshot, config: Config, parked: Parked = Parked(),
                 pause: Callable[[], None] = no_pause):
        self.snapshot, self.config, self.parked, self.pause = snapshot, config, parked, pause
        # where capacity or quota may have come back since the parked jobs were decided (this cycle's preemptions too)
        self.freed_clusters, self.freed_tenants = set(parked.clusters), set(parked.tenants)
        self.filters = [FILTERS[name]() for name in config.filters]
        self.static_filters = [f for f in self.filters if not f.depends_on_capacity]  # "would it ever fit?"
        # the leading filters whose answers no decision changes are asked once per shape (`_fixed_reasons`)
        lead = next((i for i, f in enumerate(self.filters) if not f.fixed), len(self.filters))
        self.fixed_filters, self.changing_filters = self.filters[:lead], self.filters[lead:]
        self.fixed_reasons: dict[tuple, tuple[str | None, ...]] = {}
        self.scores = [(SCORES[name](), weight) for name, weight in sorted(config.score_weights.items()) if weight]
        self.weight_sum = sum(w for _, w in self.scores) or 1.0
        self.holds: dict[str, Hold] = {}  # job id -> the nodes held for it
        self.held: dict[str, HeldNodes] = {}  # cluster -> its holds
        self.blocked: dict[str, set[str]] = {}  # cluster -> its HyperNodes with a held node
        self.taken: dict[str, tuple[ClusterIndex, dict[int, dict[str, int]]]] = {}  # holder -> what its hold took
        # cluster -> per node, the running work's last expected end and its pods (`_node_ends`): read at the first hold
        self.node_ends: dict[str, tuple[list[float | None], list[int]]] = {}
        self.placed: list[tuple[Placement, PendingJob]] = []  # the cycle's placements until `node_ends` is read
        self.evicted: set[str] = set()
        self.reason_maps: dict[tuple, Mapping[str, str]] = {}  # `_shared`
        self.released: set[str] = set()  # `_released`, as of `released_at` holds
        self.answers: dict[tuple, bool] = {}  # `_may_fit`, `_may_fit_preempting`: since the last change
        self.unplaced: dict[tuple, Waiting] = {}  # `_decide_or_recall`: since the last change
        # `_place`: (shape, part) -> cluster -> (the cluster's version, its reason or None, the negative score of its
        # estimate or None), while the cluster is as it was
        self.estimates: dict[tuple, dict[str, tuple[int, str | None, float | None]]] = {}
        # `_place`: (shape, part) -> the fixed filters' key -> the line of clusters it made last, and why the others
        # were out, as of each cluster's version then
        self.lines: dict[tuple, dict[tuple, Line]] = {}
        self.ordered = list(snapshot.clusters.values())  # the snapshot's clusters, in its order
        self.names = [cluster.name for cluster in self.ordered]
        self.position = {name: i for i, name in enumerate(self.names)}
        self.within_share: dict[str, bool] = {}  # `_within_share`: since the last change
        self.standings: dict[str, dict[tuple, tuple]] = {}  # tenant -> (queue, demand) -> `_standing`'s shares
        self.demands: dict[str, tuple] = {}  # shape -> `_demand_key`
        self.kinds: dict[tuple, tuple[bool, tuple]] = {}  # `_kind_against`: since the last change
        self.released_at = -1
        self.inadmissible: set[str] = set()
        self.reserves = "Reservation" in config.filters
        # tenants with work, running or pending: those the federation is shared among (`fair`)
        self.active: set[str] = {t for t, usage in snapshot.tenant_usage.items() if any(usage.values())}
        self.fair: dict[str, float] = {}  # every pending job's tenant is activated before its job is decided
        # the running jobs by queue, and by queue and cluster with their priorities: whom a job may preempt
        self.work: dict[str, list[str]] = {}
        self.work_on: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for job_id, placements in snapshot.running.items():
            first = placements[0]
            self.work.setdefault(first.queue, []).append(job_id)
            for cluster in {p.cluster for p in placements}:
                self.work_on.setdefault((first.queue, cluster), []).append((first.priority, job_id))

    def activate(self, tenants: Iterable[str]) -> None:
        self.active.update(tenants)
        self.fair = tenant_fair_shares({t: self.snapshot.tenant_weight(t) for t in self.active}, self.active)

    def _quota(self, job: PendingJob) -> QuotaVerdict:
        state = self.snapshot.queues[job.queue]
        cohort = ((q.queue, q.usage) for q in self.snapshot.cohorts[state.queue.tenant])
        return check_quota(state.queue, state.usage, job.spec.requests, cohort)

    def run(self, pending: Backlog) -> CycleResult:
        # Phase 1: each queue in its own order (`PendingJob.queue_order`): 1. priority, 2. submission time, 3. job id.
        queued: dict[str, list[PendingJob]] = {}
        waiting: dict[str, Waiting] = {}
        placements, preemptions, order = [], [], []
        tenants, queueless = set(), []
        for name, jobs in pending.queues.items():
            if name not in self.snapshot.queues:
                queueless += jobs
                tenants.update(map(TENANT, jobs))
            elif jobs:
                queued[name] = jobs[::-1]  # pop() takes the head
                tenant = self.snapshot.queues[name].queue.tenant  # its jobs' (a job is its queue's tenant's)
                if jobs[0].tenant != tenant:
                    raise ValueError(f"job {jobs[0].id} of queue {name} belongs to tenant {jobs[0].tenant}, the "
                                     f"queue to {tenant}: a queue holds its tenant's jobs")
                tenants.add(tenant)
        self.activate(tenants)
        for job in queueless:
            waiting[job.id] = self.decide(job).waiting
            order.append(job.id)
        # Keys are computed with the snapshot as it is after `changes` decisions that placed, preempted or held
        # something (the others change nothing); a key computed since the last of them is still right.
        changes = 0
        heap = []
        for name, jobs in queued.items():
            heap.append((self._queue_key(self.snapshot.queues[name], jobs[-1]), name, changes))
        heapq.heapify(heap)
        # Phase 2 and 3: decide queue heads in fairness order; keys are re-checked when popped.
        while heap:
            self.pause()
            key, name, computed_at = heapq.heappop(heap)
            state, jobs = self.snapshot.queues[name], queued[name]
            current = key if computed_at == changes else self._queue_key(state, jobs[-1])
            if current > key and heap and current > heap[0][0]:
                heapq.heappush(heap, (current, name, changes))
                continue
            job = self._pop_past_parked(state, jobs, heap, changes)
            if job is None:
                continue
            stays = self._stays_inadmissible(job)
            outcome = self._decide_or_recall(job)
            order.append(job.id)
            if outcome.placements or outcome.preemptions or job.id in self.holds:
                changes += 1
                self.answers.clear()
                self.kinds.clear()
                self.unplaced.clear()
                self.within_share.clear()
                self._holding_changed(job, outcome.preemptions)
            elif stays and outcome.waiting:
                self.inadmissible.add(job.id)
            placements += outcome.placements
            preemptions += outcome.preemptions
            if outcome.waiting:
                waiting[job.id] = outcome.waiting
            if jobs:
                heapq.heappush(heap, (self._queue_key(state, jobs[-1]), name, changes))
            if outcome.preemptions:  # the victims' queues (and tenants) now hold less: their keys went down
                heap = [(self._queue_key(self.snapshot.queues[n], queued[n][-1]), n, changes) for _, n, _ in heap]
                heapq.heapify(heap)
        self.release_holds()
        return CycleResult(tuple(placements), tuple(preemptions), MappingProxyType(waiting),
                           MappingProxyType(dict(self.holds)), tuple(order), frozenset(self.inadmissible))

    def _holding_changed(self, job: PendingJob, preemptions: list[Preemption]) -> None:
        """Forget the standings of the tenants whose queues hold more or less now: the job's, and its victims'."""
        for queue in {job.queue, *(self.snapshot.running[p.job_id][0].queue for p in preemptions)}:
            if queue in self.snapshot.queues:
                self.standings.pop(self.snapshot.queues[queue].queue.tenant, None)

    def _whole(self, job: PendingJob) -> Request:
        spec = job.spec
        return Request(job, None, spec.parts, spec.requests, spec.tier_bound, self.held)

    def _split(self, job: PendingJob) -> list[Request]:
        spec = job.spec
        return [Request(job, p.name, (p,), p.requests, spec.tier_bound, self.held) for p in spec.parts]

    @staticmethod
    def _filter(request: Request, cluster: ClusterIndex, filters: list) -> str | None:
        """The first reason one of `filters` gives to keep the request off the cluster, or None."""
        for plugin in filters:
            reason = plugin.filter(request, cluster)
            if reason:
                return reason
        return None

    def _score(self, request: Request, candidate: Candidate) -> float:
        return sum(w * plugin.score(request, candidate) for plugin, w in self.scores) / self.weight_sum

    # -- applying decisions ---------------------------------------------------------------------
    def _apply(self, placement: Placement, job: PendingJob, sign: int = 1) -> None:
        label = next((p.exclusive_topology for p in job.spec.parts if p.exclusive_topology), None)
        self.snapshot.occupy(placement.cluster, job.queue, placement.node_usage, placement.node_pods,
                             label if placement.exclusive_domains else None, sign)
        self._placed(placement, job, sign)

    def _unapply(self, placement: Placement, job: PendingJob) -> None:
        self._apply(placement, job, -1)

    def _evict(self, job_id: str, sign: int) -> None:
        for r in self.snapshot.running[job_id]:
            self.snapshot.occupy(r.cluster, r.queue, r.node_usage, r.node_pods, r.exclusive_topology, -sign)


def schedule(snapshot: Snapshot, pending: Backlog | Iterable[PendingJob], config: Config = Config(),
             parked: Parked = Parked(), pause: Callable[[], None] = no_pause) -> CycleResult:
    """Decide placements, preemptions and reasons for the pending jobs (a `Backlog`, or jobs in any order to make one
    of; a job belongs to its queue's tenant); the snapshot keeps the decisions.
    `parked`: jobs found inadmissible before, not decided again (no reason for them) while they stay so.
    `pause`: called between decisions and every `JOBS_BETWEEN_PAUSES` jobs walked (for a process whose requests go
    first, `broker.process.courtesy`); it may wait, and must not change anything the cycle reads."""
    return _Cycle(snapshot, config, parked, pause).run(pending if isinstance(pending, Backlog) else Backlog.of(pending))


def dry_run(snapshot: Snapshot, job: PendingJob, config: Config = Config()) -> DryRun:
    """Where would this job go now, and why — as if it were the next decision; the snapshot is unchanged."""
    cycle = _Cycle(snapshot, config)
    cycle.activate([job.tenant])
    outcome = cycle.decide(job, explain=True)
    for placement in outcome.placements:
        cycle._unapply(placement, job)
    for victim in cycle.evicted:
        cycle._evict(victim, -1)
    cycle.release_holds()
    # a cluster without a verdict was never looked at (the queue or its quota stopped the job first)
    verdicts = tuple(outcome.verdicts.get(name, ClusterVerdict(name, None)) for name in snapshot.clusters)
    return DryRun(tuple(outcome.placements), tuple(outcome.preemptions), outcome.waiting, verdicts)
