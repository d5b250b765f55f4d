"""One scheduling cycle over one snapshot, in numbered phases (after Kueue's scheduler).

1. Take the pending jobs by queue, each queue in its order (priority, then submission, then id: `Backlog`).
2. Repeatedly take the head of the queue that should go next (`_queue_key`).
3. Decide that job: quota, then filters and scores per cluster, then bind the gang to nodes.
   If it does not fit: preempt where the queue allows it, else, once it has waited too long, hold
   for it the nodes of the HyperNode where it would fit soonest (`_hold`), and record per cluster
   why it waits.
4. Every decision is applied to the snapshot at once, so the next one sees it; a hold takes the
   free capacity of its nodes, so no later decision of the cycle uses them.

Holds last one cycle: they are recomputed by the next one, where the long-waiting jobs go first.
`schedule` leaves the snapshot holding the cycle's decisions (not its holds); `dry_run` leaves it unchanged.

Inadmissible jobs (after Kueue's inadmissible lists): a job that did not fit and got no hold, that may
preempt nothing beyond its own queue, does not fit later either while capacity, quota and the nodes
held for others only shrink. `schedule` reports them; given back as `Parked` with what changed since
(the caller's part to know: clusters that changed or got capacity back, tenants whose queues hold
less, the nodes held at the end of that cycle), each keeps its turn in its queue but is decided again
only if a change concerns it, or it may take a hold now (`_still_inadmissible`); a decision that places
and holds nothing changes nothing, so the cycle decides as if it had decided them all. A parked job's turn
costs a dictionary lookup: between two changes, jobs of one kind (shape, queue, priority) share their verdict
and where their key falls against the other queues' next one, jobs of one demand in a queue share their standing
(the key but for submission and id, `_standing`) until a decision changes what their tenant holds, and the turns
of a queue's parked jobs follow one another without the heap while no other queue's head comes first
(`_pop_past_parked`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from operator import attrgetter
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from broker.placement.decisions import (ClusterVerdict, CycleResult, DryRun, Hold, NodeAssignment, Parked,
                                        Placement, Preemption, Waiting)
from broker.placement.explain import amount, duration, pods_phrase
from broker.placement.fairness import (QuotaVerdict, check_quota, dominant_share, fair_share_allows,
                                       tenant_fair_shares, weighted_share)
from broker.placement.model import Backlog, PendingJob, RunningPlacement, no_pause
from broker.placement.plugins import FILTERS, SCORES, Candidate, HeldNodes, Request
from broker.placement.snapshot import ClusterIndex, Fit, HyperNodeState, QueueState, Snapshot, eligibility_key, fits
from clusters.quantity import add_into

DEFAULT_FILTERS = ("ClusterState", "JobSetCRD", "RecentEviction", "ClusterSelector", "TaintToleration",
                   "NodeEligibility", "Reservation", "Capacity", "ExclusiveTopology", "TopologyBound")
DEFAULT_SCORE_WEIGHTS = MappingProxyType({"TightestTier": 4.0, "BinPacking": 2.0, "Spread": 0.0, "Locality": 1.0})
TENANT = attrgetter("tenant")


@dataclass(frozen=True)
class Config:
    """What the settings layer controls. Filter and score names are those of `plugins.FILTERS`/`SCORES`."""

    filters: tuple[str, ...] = DEFAULT_FILTERS
    score_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_SCORE_WEIGHTS)
    max_candidates_per_tier: int = 16  # HyperNodes tried per tier before moving up (bounds fragmented tiers)
    starvation_after_s: float = 900.0  # a job waiting longer goes first and may hold the nodes it needs
    # the oldest this many starving jobs that do not fit get a hold each cycle (Slurm's backfill reservation
    # depth): every hold idles nodes, and looking for one costs a pass over every HyperNode
    max_holds: int = 32
    preemption: bool = True  # master switch over the queues' LowerPriority policies

    def __post_init__(self):
        unknown = [n for n in (*self.filters, *self.score_weights) if n not in FILTERS and n not in SCORES]
        if unknown:
            raise ValueError(f"unknown placement plugins {unknown}; known: {sorted(FILTERS) + sorted(SCORES)}")


@dataclass(slots=True)
class _Outcome:
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: Waiting | None = None
    verdicts: dict[str, ClusterVerdict] = field(default_factory=dict)


@dataclass(slots=True)
class _Line:
    """What `_place` made of the clusters for one kind of request (`_Cycle.lines`), by the clusters' order in the
    snapshot: each one's version then (-1: to be asked again) and why it is out of line (None: in line), and the line
    (a heap of the estimates' negative scores)."""

    versions: list[int]
    reasons: list[str | None]
    line: list[tuple[float, str, bool]]


JOBS_BETWEEN_PAUSES = 512  # ~1 ms of a cycle's walk past parked jobs


class _Cycle:
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
        self.open: dict[str, list[HyperNodeState]] = {}  # cluster -> its HyperNodes without a held node
        self.taken: list[tuple[ClusterIndex, dict[int, dict[str, int]]]] = []  # what holds took, per node
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
        self.lines: dict[tuple, dict[tuple, _Line]] = {}
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

    # -- phase 2: which queue goes next -------------------------------------------------------
    def _starving(self, job: PendingJob) -> bool:
        """Has it waited past `starvation_after_s`, while its tenant holds no more than its fair share? (A tenant
        above its share waits its turn by fairness, however old its jobs: in a saturated federation every job
        grows old, and age alone would undo the fair share.)"""
        return (self.snapshot.now - job.submitted_at >= self.config.starvation_after_s
                and self._within_share(job.tenant))

    def _within_share(self, tenant: str) -> bool:
        if tenant not in self.within_share:
            usage = self.snapshot.tenant_usage.get(tenant, {})
            self.within_share[tenant] = dominant_share(usage, self.snapshot.totals) <= self.fair[tenant] + 1e-9
        return self.within_share[tenant]

    def _quota(self, job: PendingJob) -> QuotaVerdict:
        state = self.snapshot.queues[job.queue]
        cohort = ((q.queue, q.usage) for q in self.snapshot.cohorts[state.queue.tenant])
        return check_quota(state.queue, state.usage, job.spec.requests, cohort)

    def _queue_key(self, state: QueueState, job: PendingJob) -> tuple:
        """Which queue head is decided next; the lowest key goes first:

        1. jobs that have waited past `starvation_after_s` of tenants not above their fair share, oldest
           first (so none starves forever, and age does not undo fairness; `_starving`);
        2. a job that fits its queue's nominal quota before one that must borrow;
        3. the lowest weighted dominant share of the queue's tenant once the job is admitted, by
           tenant weight (hierarchical DRF: tenants share the federation, whatever their queues);
        4. the lowest weighted dominant share of the queue, by queue weight (its tenant's queues
           share what the tenant gets);
        5. the higher job priority;
        6. the higher queue priority;
        7. the earlier submission;
        8. tie-break: queue name, then job id.
        """
        queue = state.queue
        if self._starving(job):
            return (False, job.submitted_at, *self._standing(state, job)[2:], job.submitted_at, queue.name, job.id)
        return self._standing(state, job) + (job.submitted_at, queue.name, job.id)

    def _standing(self, state: QueueState, job: PendingJob) -> tuple:
        """`_queue_key` but for criteria 7 and 8, for a job that is not starving: it reads the job's priority and its
        demand alone (every parked job of the backlog takes its turn, a key each), and how much its tenant and that
        tenant's queues hold: shared by the jobs of one demand in a queue, and kept per tenant until a decision
        changes what it holds (`_holding_changed`)."""
        queue = state.queue
        memo = self.standings.setdefault(queue.tenant, {})
        demand = job.spec.requests
        key = (queue.name, self._demand_key(job))
        shares = memo.get(key) if key[1] is not None else None
        if shares is None:
            totals = self.snapshot.totals
            shares = memo[key] = (
                bool(queue.nominal_quota) and self._quota(job).borrowing,  # without a quota it never borrows
                weighted_share(self.snapshot.tenant_usage[queue.tenant], demand,
                               self.snapshot.tenant_weight(queue.tenant), totals),
                weighted_share(state.usage, demand, queue.weight, totals))
        return (True, 0.0, *shares, -job.priority, -queue.priority)

    def _demand_key(self, job: PendingJob) -> tuple | None:
        """Its demand, hashable: one per shape (None for a job without one, whose demand is not worth keeping)."""
        if job.shape is None:
            return None
        key = self.demands.get(job.shape)
        if key is None:
            key = self.demands[job.shape] = tuple(sorted(job.spec.requests.items()))
        return key

    def _may_preempt_beyond_queue(self, job: PendingJob) -> bool:
        """May it preempt other queues' work (`_candidates`)? Whether those may be taken depends on how much their
        queue or tenant holds, which this cycle's placements raise: a job that could not, might later in the cycle.
        (Its own queue's work of lower priority, it may take whatever this cycle placed.)"""
        queue = self.snapshot.queues[job.queue].queue
        tenant = self.snapshot.tenants.get(job.tenant)
        return self.config.preemption and (queue.reclaim_within_cohort != "Never" or (
            tenant is not None and tenant.fair_share_preemption != "Never"))

    def _stays_inadmissible(self, job: PendingJob) -> bool:
        """If it does not fit now, will it not fit later either while capacity, quota and held nodes only shrink?
        Not when time may change its lot (avoided clusters), nor when others' work may be taken."""
        return not job.avoided and not self._may_preempt_beyond_queue(job)

    def _may_hold(self, job: PendingJob) -> bool:
        """Would it get a hold if it did not fit? Only a starving job, and only while holds are left this cycle."""
        return self.reserves and len(self.holds) < self.config.max_holds and self._starving(job)

    def _still_inadmissible(self, job: PendingJob) -> bool:
        """A parked job that no change concerns: quota its tenant got back cannot have held it (its queue limits
        none of what it asks), and on each cluster where capacity came back it fails the filters or the search on
        HyperNode totals — whole, and each part of a split job — even with all the work there it may preempt gone.
        (Its queue's new work is no reason: it took what was free, and preempting it gives back no more than that.)"""
        if job.id not in self.parked.jobs or self._may_hold(job):
            return False
        if job.shape is None or job.avoided:
            return self._stays_inadmissible(job) and not self._concerned(job)
        return self._kind_stays(job)

    def _kind_stays(self, job: PendingJob) -> bool:
        """`_still_inadmissible` for a parked job with a shape and no clusters to avoid that may not hold: jobs of one
        kind are alike here, one answer per kind until the next decision that changes anything."""
        memo = ("inadmissible", job.shape, job.queue, job.priority, job.tenant)
        verdict = self.answers.get(memo)
        if verdict is None:
            verdict = self.answers[memo] = self._stays_inadmissible(job) and not self._concerned(job)
        return verdict

    def _concerned(self, job: PendingJob) -> bool:
        """Does a change since it was parked concern it: quota back in its tenant, capacity back where it may fit?"""
        if job.tenant in self.freed_tenants and self._limited_by_quota(job):
            return True
        preempts = self.config.preemption and self.snapshot.queues[job.queue].queue.preemption == "LowerPriority"
        for name in self.freed_clusters | self._released():
            cluster = self.snapshot.clusters.get(name)
            if cluster is not None and (self._may_fit(job, cluster) or preempts and self._may_fit_preempting(
                    job, cluster)):
                return True
        return False

    def _may_fit(self, job: PendingJob, cluster: ClusterIndex) -> bool:
        """Does it pass the filters and the search on HyperNode totals there, whole or (split) a part of it?
        One answer per job shape (`PendingJob.shape`) until the next decision that changes anything."""
        key = ("fit", cluster.name, job.shape)
        if job.shape is None or key not in self.answers:
            cap = self.config.max_candidates_per_tier
            requests = [self._whole(job), *self._split(job)] if job.spec.placement == "split" else [self._whole(job)]
            self.answers[key] = any(self._filter(r, cluster, self.filters) is None and cluster.search(
                r.parts, r.demand, r.bound, cap, bind=False) is not None for r in requests)
        return self.answers[key]

    def _may_fit_preempting(self, job: PendingJob, cluster: ClusterIndex) -> bool:
        """Would it fit there, whole, with all the lower-priority work of its queue there gone (`LowerPriority`)?
        One answer per job shape, queue and priority until the next decision that changes anything."""
        key = ("preempting", cluster.name, job.shape, job.queue, job.priority)
        if job.shape is None or key not in self.answers:
            request, victims = self._whole(job), self._lower_priority_work(job, cluster.name)
            self.answers[key] = bool(victims) and self._filter(request, cluster, self.static_filters) is None and \
                self._fits_without(request, cluster, victims)
        return self.answers[key]

    def _released(self) -> set[str]:
        """Clusters where a node held at the end of the parked jobs' cycle is not held now: capacity back for them."""
        if self.released_at != len(self.holds):
            held: dict[str, set[str]] = {}
            for hold in self.holds.values():
                held.setdefault(hold.cluster, set()).update(hold.nodes)
            self.released = {name for name, nodes in self.parked.held.items() if not nodes <= held.get(name, set())}
            self.released_at = len(self.holds)
        return self.released

    def _limited_by_quota(self, job: PendingJob) -> bool:
        """Can quota have kept it waiting? Only if its queue has a nominal quota of something it asks for."""
        quota = self.snapshot.queues[job.queue].queue.nominal_quota
        return any(wanted and resource in quota for resource, wanted in job.spec.requests.items())

    def _lower_priority_work(self, job: PendingJob, cluster: str) -> list[str]:
        """Its queue's running jobs of lower priority on the cluster: what `LowerPriority` lets it preempt there."""
        return [v for priority, v in self.work_on.get((job.queue, cluster), ())
                if priority < job.priority and v not in self.evicted]

    def _fits_without(self, request: Request, cluster: ClusterIndex, victims: list[str]) -> bool:
        """Would the request fit the cluster's HyperNode totals with the victims gone? The snapshot is left as found."""
        for victim in victims:
            self._evict(victim, +1)
        try:
            return cluster.search(request.parts, request.demand, request.bound, self.config.max_candidates_per_tier,
                                  bind=False) is not None
        finally:
            for victim in victims:
                self._evict(victim, -1)

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

    def _pop_past_parked(self, state: QueueState, jobs: list[PendingJob], heap: list, changes: int) -> PendingJob | None:
        """The queue's head to decide, past the parked jobs that stay inadmissible: each one's turn passes with nothing
        decided, and while the next head's key comes before every other queue's, its turn is now (no trip through the
        heap). None once the queue is empty or another queue goes first (this one is back in the heap).

        The walk changes nothing, so what `_still_inadmissible` and `_queue_key` say of a job here is said once per
        kind (shape, priority) and reused for the walk: a backlog of parked jobs costs a lookup each."""
        top = heap[0][0] if heap else None
        parked, inadmissible = self.parked.jobs, self.inadmissible
        now, patience = self.snapshot.now, self.config.starvation_after_s
        holds_left = self.reserves and len(self.holds) < self.config.max_holds
        seen: dict[tuple, tuple[bool, int]] = {}  # (shape, priority) -> `_kind_against` (a queue has one tenant)
        job, bounded = jobs.pop(), False  # bounded: past the head, whose key was the heap's first
        while True:
            if job.shape is None or job.avoided or job.id not in parked:
                if bounded and self._queue_key(state, job) > top:
                    break
                if not self._still_inadmissible(job):
                    return job
            else:
                if now - job.submitted_at >= patience:  # maybe starving: its own key says, and it may take a hold
                    if bounded and self._queue_key(state, job) > top:
                        break
                    if holds_left and self._within_share(job.tenant):
                        return job  # `_may_hold`
                    kind = seen.get((job.shape, job.priority)) or self._kind_against(state, job, top, seen)
                else:
                    kind = seen.get((job.shape, job.priority)) or self._kind_against(state, job, top, seen)
                    if bounded and (kind[1] > 0 or kind[1] == 0 and self._queue_key(state, job) > top):
                        break
                if not kind[0]:
                    return job
            inadmissible.add(job.id)
            if not jobs:
                return None
            if not len(jobs) % JOBS_BETWEEN_PAUSES:
                self.pause()
            job, bounded = jobs.pop(), top is not None
        jobs.append(job)  # another queue goes first
        heapq.heappush(heap, (self._queue_key(state, job), state.queue.name, changes))
        return None

    def _kind_against(self, state: QueueState, job: PendingJob, top: tuple | None, seen: dict) -> tuple[bool, int]:
        """For `_pop_past_parked`, of a parked job with a shape and no clusters to avoid: does one of its kind that
        may not hold stay inadmissible (`_kind_stays`), and does its standing when not starving come before the
        other queues' first key, `top` (-1), after it (1), or tie (0: its submission and id tell)? Kept in `seen`."""
        key = (state.queue.name, job.shape, job.priority, job.tenant)
        kind = self.kinds.get(key)
        if kind is None:  # one answer per kind until the next decision that changes anything
            kind = self.kinds[key] = (self._kind_stays(job), self._standing(state, job))
        stays, standing = kind
        edge = standing if top is None else top[:len(standing)]
        seen[job.shape, job.priority] = answer = (stays, (standing > edge) - (standing < edge))
        return answer

    # -- phase 3: one job -----------------------------------------------------------------------
    def _decide_or_recall(self, job: PendingJob) -> _Outcome:
        """`decide`, unless a job of the same shape, queue and priority was decided since the last decision that
        changed anything and could be placed nowhere: then it waits for the same reasons (a new leader's first cycle
        over a saturated federation decides each kind of job once, not each job). Not for a job that may take a
        hold, nor one with clusters to avoid or prefer (they read more than its shape)."""
        if job.shape is None or job.avoided or job.previous_clusters or self._may_hold(job):
            return self.decide(job)
        key = (job.shape, job.queue, job.priority)
        if key in self.unplaced:
            return _Outcome(waiting=replace(self.unplaced[key], job_id=job.id))
        outcome = self.decide(job)
        if outcome.waiting and not outcome.placements and not outcome.preemptions and job.id not in self.holds:
            self.unplaced[key] = outcome.waiting
        return outcome

    def _whole(self, job: PendingJob) -> Request:
        spec = job.spec
        return Request(job, None, spec.parts, spec.requests, spec.tier_bound, self.held)

    def _split(self, job: PendingJob) -> list[Request]:
        spec = job.spec
        return [Request(job, p.name, (p,), p.requests, spec.tier_bound, self.held) for p in spec.parts]

    def decide(self, job: PendingJob, explain: bool = False) -> _Outcome:
        """Place the job whole (or every part of it), or leave it waiting with reasons; updates the snapshot."""
        outcome = _Outcome()
        if job.queue not in self.snapshot.queues:
            outcome.waiting = Waiting(job.id, f"queue {job.queue} does not exist")
            return outcome
        verdict = self._quota(job)
        if not verdict.admissible:
            if not self._preempt(job, outcome, verdict):  # only its own queue's work can make it fit its quota
                outcome.waiting = Waiting(job.id, verdict.message)
            return outcome
        reasons: dict[str, str] = {}
        verdicts = outcome.verdicts if explain else None
        together = self._place(self._whole(job), reasons, verdicts)
        if together is not None:
            # A split job that fits one place is kept together: one placement per part, same HyperNode.
            outcome.placements = [together] if job.spec.placement == "whole" else _per_part(
                together, job, self.snapshot.clusters[together.cluster])
            return outcome
        request = self._whole(job)
        if job.spec.placement == "split":
            reasons.clear()
            used: set[str] = set()
            for request in self._split(job):
                request.clusters_used = frozenset(used)
                placement = self._place(request, reasons, verdicts)
                if placement is None:
                    break
                outcome.placements.append(placement)
                used.add(placement.cluster)
            else:
                return outcome
            for placement in outcome.placements:  # gang: all parts or none
                self._unapply(placement, job)
            outcome.placements = []
        if self._preempt(job, outcome, verdict):
            return outcome
        part = "" if request.part is None else f" (ReplicatedJob {request.part})"
        summary = f"no cluster can take it now{part}"
        hold = self._hold(job) if self._may_hold(job) else None
        if hold:
            summary += (f"; {hold.where()} {'is' if len(hold.nodes) == 1 else 'are'} held for it because it has "
                        f"waited over {duration(self.config.starvation_after_s)}; it waits there for running work "
                        f"of up to {hold.waiting_for} to end")
        outcome.waiting = Waiting(job.id, summary, self._shared(reasons))
        return outcome

    def _shared(self, reasons: dict[str, str]) -> Mapping[str, str]:
        """One mapping for equal reasons, in the clusters' order: jobs of one shape wait for the same reasons, and a
        cycle over 100,000 pending jobs would otherwise hold a copy of them per job (a bind that failed for this job
        adds its reason last, one that failed for an earlier job of the shape in its place)."""
        ordered = tuple(sorted(reasons.items()))
        shared = self.reason_maps.get(ordered)
        if shared is None:
            shared = self.reason_maps[ordered] = MappingProxyType(dict(ordered))
        return shared

    def _fixed_reasons(self, request: Request) -> tuple[tuple, tuple[str | None, ...]]:
        """What the fixed filters say of each cluster, in the snapshot's order, with the key of what they read
        (`FilterPlugin.fixed`): asked once per cycle for that key — a cycle over a saturated federation asks them of
        every cluster for thousands of jobs of hundreds of shapes, and a few kinds of constraints."""
        job = request.job
        key = (job.spec.cluster_selector, tuple((p.name, eligibility_key(p)) for p in request.parts),
               tuple(job.avoided.items()))
        reasons = self.fixed_reasons.get(key)
        if reasons is None:
            reasons = self.fixed_reasons[key] = tuple(self._filter(request, cluster, self.fixed_filters)
                                                      for cluster in self.ordered)
        return key, reasons

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

    def _place(self, request: Request, reasons: dict[str, str],
               verdicts: dict[str, ClusterVerdict] | None) -> Placement | None:
        """Filter, score on HyperNode totals, then bind the best cluster's gang to nodes; apply it.

        Estimates are optimistic, so when binding lands somewhere worse than estimated the
        cluster is re-scored and goes back in line behind any better estimate.
        """
        cap = self.config.max_candidates_per_tier
        job = request.job
        # what the changing filters, the estimate and the scores say of a cluster follows from the request's shape and
        # part and the cluster's state alone, unless the job prefers clusters it ran on (Locality) or this is a split
        # job's later part (Spread reads where the others went): kept per cluster while its version lasts (a decision
        # changes one or two clusters of fifty), and so is the line they make. The clusters a job avoids never get this
        # far (`_fixed_reasons`).
        shared = job.shape is not None and not job.previous_clusters and not request.clusters_used
        known = self.estimates.setdefault((job.shape, request.part), {}) if shared else {}
        fixed_key, fixed = self._fixed_reasons(request)
        kind = self.lines.setdefault((job.shape, request.part), {}) if shared else {}
        kept = self._line(kind, fixed_key, request, known, fixed, cap)
        out = [(name, reason) for name, reason in zip(self.names, kept.reasons) if reason]
        reasons.update(out)
        if verdicts is not None:
            verdicts.update((name, ClusterVerdict(name, None, reason)) for name, reason in out)
        line = list(kept.line)  # a heap already
        bound: dict[str, Fit] = {}
        while line:
            negative, name, bound_already = heapq.heappop(line)
            cluster = self.snapshot.clusters[name]
            fit = bound.get(name) or cluster.search(request.parts, request.demand, request.bound, cap, bind=True)
            if fit is None:
                reasons[name] = self._no_fit(request, cluster)
                known[name] = (cluster.version, reasons[name], None)  # binds no better until the cluster changes
                for other in kind.values():  # where it stands in every line of the shape is what `known` says now
                    other.versions[self.position[name]] = -1
                if verdicts is not None:
                    verdicts[name] = ClusterVerdict(name, None, reasons[name])
                continue
            score = self._score(request, Candidate(cluster, fit.hypernode))
            if not bound_already and line and -score > line[0][0]:
                bound[name] = fit
                heapq.heappush(line, (-score, name, True))
                continue
            if verdicts is not None:
                verdicts[name] = ClusterVerdict(name, round(score, 3))
                for other_negative, other, _ in line:
                    verdicts[other] = ClusterVerdict(other, round(-other_negative, 3))
            placement = _to_placement(request, cluster, fit, score)
            self._apply(placement, request.job)
            return placement
        return None

    def _line(self, kind: dict[tuple, _Line], fixed_key: tuple, request: Request, known: dict,
              fixed: tuple[str | None, ...], cap: int) -> _Line:
        """The clusters in line for the request, and why the others are out: the line `_place` made last for this
        kind of request and fixed filters' key, brought up to date — the clusters changed since are asked again (a
        cycle over a saturated federation places thousands of jobs of a few hundred shapes; between two jobs of one
        shape, a few clusters of fifty change)."""
        kept = kind.get(fixed_key)
        if kept is None:
            kept = kind[fixed_key] = _Line([-1] * len(self.ordered), [None] * len(self.ordered), [])
        versions = kept.versions
        changed = [i for i, cluster in enumerate(self.ordered) if cluster.version != versions[i]]
        if not changed:
            return kept
        names = {self.names[i] for i in changed}
        line = [entry for entry in kept.line if entry[1] not in names]
        for i in changed:
            cluster = self.ordered[i]
            kept.reasons[i], negative = self._said(request, cluster, fixed[i], known, cap)
            if negative is not None:
                line.append((negative, cluster.name, False))
            versions[i] = cluster.version
        heapq.heapify(line)
        kept.line = line
        return kept

    def _said(self, request: Request, cluster: ClusterIndex, fixed_reason: str | None, known: dict,
              cap: int) -> tuple[str | None, float | None]:
        """Why the request cannot go to the cluster, or the negative score of its estimate there: the fixed
        filters' reason, else what `known` kept for the cluster's version, else `_estimate` (kept in `known`)."""
        if fixed_reason is not None:
            return fixed_reason, None
        said = known.get(cluster.name)
        if said is not None and said[0] == cluster.version:
            return said[1], said[2]
        reason, negative = self._estimate(request, cluster, cap), None
        if not isinstance(reason, str):
            reason, negative = None, reason
        known[cluster.name] = (cluster.version, reason, negative)
        return reason, negative

    def _estimate(self, request: Request, cluster: ClusterIndex, cap: int) -> str | float:
        """The first reason the changing filters or the search on HyperNode totals give to keep the request off
        the cluster, or the negative score of the estimate where it would go."""
        reason = self._filter(request, cluster, self.changing_filters)
        if reason is not None:
            return reason
        estimate = cluster.search(request.parts, request.demand, request.bound, cap, bind=False)
        if estimate is None:
            return self._no_fit(request, cluster)
        return -self._score(request, Candidate(cluster, estimate.hypernode))

    def _no_fit(self, request: Request, cluster: ClusterIndex) -> str:
        """Why the search found no place, after the filters passed: the gang's pods do not fit nodes."""
        part = max(request.parts, key=lambda p: p.pods)
        # each node is looked at: one answer per shape until the next decision that changes anything
        key = ("scarcest", cluster.name, request.job.shape, part.name)
        if request.job.shape is None or key not in self.answers:
            self.answers[key] = cluster.scarcest(part)
        what = pods_phrase(part.pods, part.pod_requests, self.answers[key])
        if request.bound is not None:
            return (f"needs {amount(request.primary, request.need)} in one tier-{request.bound} "
                    f"HyperNode; those with enough free cannot hold {what} on their nodes")
        return f"free capacity is fragmented: its nodes cannot hold {what}"

    # -- applying decisions ---------------------------------------------------------------------
    def _apply(self, placement: Placement, job: PendingJob, sign: int = 1) -> None:
        label = next((p.exclusive_topology for p in job.spec.parts if p.exclusive_topology), None)
        self.snapshot.occupy(placement.cluster, job.queue, placement.node_usage, placement.node_pods,
                             label if placement.exclusive_domains else None, sign)

    def _unapply(self, placement: Placement, job: PendingJob) -> None:
        self._apply(placement, job, -1)

    def _evict(self, job_id: str, sign: int) -> None:
        for r in self.snapshot.running[job_id]:
            self.snapshot.occupy(r.cluster, r.queue, r.node_usage, r.node_pods, r.exclusive_topology, -sign)

    # -- when it does not fit -------------------------------------------------------------------
    def _candidates(self, job: PendingJob, verdict: QuotaVerdict) -> dict[str, str]:
        """The running jobs the queue's policies let this job preempt, each with the rule that allows it.

        - WithinQueue (queue policy `LowerPriority`): the queue's own work of lower priority.
        - ReclaimWithinCohort (`reclaim_within_cohort`), only for a job within its queue's nominal quota:
          work of the tenant's other queues (`LowerPriority`: of lower priority; `Any`: any), taken
          only while its queue borrows (`_borrowing`).
        - FairSharing (the tenant's `fair_share_preemption`), for a job its quota admits and that leaves
          its tenant within its fair share: other tenants' work, of any priority, taken only while
          their tenant stays at or above its own fair share (`_fair_to_take`).
        """
        queue = self.snapshot.queues[job.queue].queue
        within = queue.preemption == "LowerPriority"
        reclaim = "Never" if verdict.borrowing else queue.reclaim_within_cohort
        tenant = self.snapshot.tenants.get(job.tenant)
        fair = (verdict.admissible and tenant is not None and tenant.fair_share_preemption != "Never"
                and self._fair_to_take(job, None))
        if not self.config.preemption or (not within and reclaim == "Never" and not fair):
            return {}
        if fair:
            scope: Iterable[str] = self.snapshot.running
        elif reclaim != "Never":
            scope = [v for state in self.snapshot.cohorts[queue.tenant] for v in self.work.get(state.queue.name, ())]
        else:
            scope = self.work.get(job.queue, ())
        rules = {}
        for job_id in scope:
            first = self.snapshot.running[job_id][0]
            if job_id in self.evicted:
                continue
            if first.tenant != job.tenant:
                if fair:
                    rules[job_id] = "FairSharing"
            elif first.queue == job.queue:
                if within and first.priority < job.priority:
                    rules[job_id] = "WithinQueue"
            elif reclaim == "Any" or reclaim == "LowerPriority" and first.priority < job.priority:
                rules[job_id] = "ReclaimWithinCohort"
        return rules

    def _fair_to_take(self, job: PendingJob, victim: str | None) -> bool:
        """`fair_share_allows` for this job and this victim (None: could the job take from anyone at all?)."""
        totals, usage = self.snapshot.totals, self.snapshot.tenant_usage
        mine = dict(usage.get(job.tenant, {}))
        add_into(mine, job.spec.requests)
        if victim is None:
            return dominant_share(mine, totals) <= self.fair[job.tenant] + 1e-9
        placements = self.snapshot.running[victim]
        theirs = dict(usage.get(placements[0].tenant, {}))
        for placement in placements:
            for amounts in placement.node_usage.values():
                add_into(theirs, amounts, -1)
        return fair_share_allows(dominant_share(mine, totals), self.fair[job.tenant],
                                 dominant_share(theirs, totals), self.fair.get(placements[0].tenant, 0.0))

    def _borrowing(self, queue_name: str, demand: Mapping[str, int]) -> bool:
        """Does the queue use more than its nominal quota of a resource the demand asks for?"""
        state = self.snapshot.queues.get(queue_name)
        return state is not None and any(
            wanted and state.usage.get(r, 0) > state.queue.nominal_quota[r]
            for r, wanted in demand.items() if r in state.queue.nominal_quota)

    def _preempt(self, job: PendingJob, outcome: _Outcome, verdict: QuotaVerdict) -> bool:
        """Evict the fewest running jobs the rules allow (`_candidates`) so that the job fits its quota and a cluster.

        The job is placed whole on that cluster (a split job too: all its parts together). Victims are whole
        jobs (gangs: every part of a split job, wherever it runs), tried per cluster in the order
        1. those running on that cluster (they make room there; the others only give quota back, and are
           tried only when the job's quota is short);
        2. by rule (`RULE_ORDER`): what the cohort's other queues borrowed, then other tenants' work above
           their fair share, then the queue's own;
        3. the lowest priority;
        4. the most recently started;
        5. tie-break: job id;
        then pruned: a victim whose return still leaves room is spared. The cluster that needs the fewest
        victims, then the lowest-priority ones, then by name, is taken.
        """
        rules = self._candidates(job, verdict)
        if not rules:
            return False
        request = self._whole(job)
        running = self.snapshot.running
        where = {v: {p.cluster for p in running[v]} for v in rules}
        best = None
        for cluster in self.snapshot.clusters.values():
            if self._filter(request, cluster, self.static_filters):
                continue
            # work elsewhere gives back only quota: it is tried only when the job's quota is short
            ordered = sorted((v for v in rules if cluster.name in where[v] or not verdict.admissible),
                             key=lambda v: (cluster.name not in where[v], RULE_ORDER[rules[v]],
                                            running[v][0].priority, -running[v][0].started_at, v))
            if not ordered:
                continue
            chosen = self._victims_for(request, cluster, ordered, rules)
            if chosen is not None:
                rank = (len(chosen), max(running[v][0].priority for v in chosen), cluster.name)
                if best is None or rank < best[0]:
                    best = (rank, cluster, chosen)
        if best is None:
            return False
        _, cluster, chosen = best
        for victim in chosen:
            self._evict(victim, +1)
            self.evicted.add(victim)
            self.freed_clusters.update(r.cluster for r in running[victim])
            self.freed_tenants.add(running[victim][0].tenant)
        fit = cluster.search(request.parts, request.demand, request.bound, self.config.max_candidates_per_tier, True)
        placement = _to_placement(request, cluster, fit, self._score(request, Candidate(cluster, fit.hypernode)))
        self._apply(placement, job)
        # a split job makes room for all of its parts at once, on one cluster: a gang preempts as one
        outcome.placements += [placement] if job.spec.placement == "whole" else _per_part(placement, job, cluster)
        for victim in chosen:
            for r in running[victim]:
                outcome.preemptions.append(Preemption(r.job_id, r.part, r.cluster, job.id,
                                                      _why(rules[victim], job, r, cluster.name), rules[victim]))
        return True

    def _victims_for(self, request: Request, cluster: ClusterIndex, ordered: list[str],
                     rules: Mapping[str, str]) -> list[str] | None:
        """The victims among `ordered` whose eviction lets the request fit its quota and this cluster;
        the snapshot is left as found."""
        cap, job = self.config.max_candidates_per_tier, request.job

        def fits_now() -> bool:
            return (self._quota(job).admissible
                    and cluster.search(request.parts, request.demand, request.bound, cap, bind=True) is not None)

        taken = []
        for victim in ordered:
            if rules[victim] == "ReclaimWithinCohort" and not self._borrowing(
                    self.snapshot.running[victim][0].queue, request.demand):
                continue  # its queue is back within its nominal quota: what is left is its own
            if rules[victim] == "FairSharing" and not self._fair_to_take(job, victim):
                continue  # its tenant would fall below its fair share
            self._evict(victim, +1)
            taken.append(victim)
            if fits_now():
                break
        else:
            for victim in taken:
                self._evict(victim, -1)
            return None
        for victim in reversed(taken[:-1]):  # spare those not needed, most important first
            self._evict(victim, -1)
            if fits_now():
                taken.remove(victim)
            else:
                self._evict(victim, +1)
        for victim in taken:
            self._evict(victim, -1)
        return taken

    def _hold(self, job: PendingJob) -> Hold | None:
        """Keep free of other jobs, for the rest of the cycle, the nodes where a long-waiting job fits soonest.

        Candidates, on each cluster that passes the filters that do not depend on capacity: the
        HyperNodes of tier ≤ the job's bound (any tier for soft topology; the whole cluster when no
        HyperNode could hold it) whose allocatable could hold the job and that contain no node held
        for another job. The lowest key wins:
        1. the least running work to wait for (the job's primary resource in use on those nodes);
        2. the smallest (allocatable of that resource), so it holds no more than it needs;
        3. the lowest tier;
        4. tie-break: cluster name, then HyperNode name.
        Its eligible nodes must hold the job by allocatable, else the next candidate is tried.
        """
        request = self._whole(job)
        demand, bound, resource = request.demand, request.bound, request.primary
        candidates: list[tuple] = []
        for cluster in self.snapshot.clusters.values():
            open_hypernodes = self.open.get(cluster.name, cluster.hypernodes.values())
            if not open_hypernodes and cluster.name in self.held:
                continue  # every node of it is held already
            if self._filter(request, cluster, self.static_filters):
                continue
            sets: list[tuple[HyperNodeState | None, Mapping[str, int], Mapping[str, int], float]] = [
                (h, h.allocatable, h.free, h.tier) for h in open_hypernodes
                if (bound is None or h.tier <= bound) and fits(h.allocatable, demand)]
            if (not sets and bound is None and cluster.name not in self.held
                    and fits(cluster.allocatable_total, demand)):
                sets = [(None, cluster.allocatable_total, cluster.free_total, math.inf)]  # after every tier
            for state, allocatable, free, tier in sets:
                total = allocatable.get(resource, 0)
                candidates.append((total - free.get(resource, 0), total, tier, cluster.name,
                                   state.name if state else "", cluster, state))
        for in_use, _, _, _, _, cluster, state in sorted(candidates, key=lambda c: c[:5]):
            positions = state.nodes if state else range(len(cluster.nodes))
            eligible = [cluster.eligible(p) for p in job.spec.parts]
            usable = [i for i in positions if any(e[i] for e in eligible)]
            if fits(_empty_capacity(cluster, usable), demand):
                return self._take(job, cluster, state, usable, amount(resource, in_use))
        return None

    def _take(self, job: PendingJob, cluster: ClusterIndex, state: HyperNodeState | None, positions: list[int],
              waiting_for: str) -> Hold:
        """Hold the nodes: their free capacity leaves the snapshot and they take no pod of another job."""
        taken = {i: dict(cluster.free[i]) for i in positions}
        free: dict[str, int] = {}
        for amounts in taken.values():
            add_into(free, amounts)
        self._lock(cluster, taken, +1)
        self.taken.append((cluster, taken))
        hold = Hold(job.id, cluster.name, state.name if state else None, state.tier if state else None,
                    tuple(sorted(cluster.nodes[i].name for i in positions)), MappingProxyType(free), waiting_for)
        self.holds[job.id] = hold
        self.held.setdefault(cluster.name, HeldNodes()).add(hold)
        blocked = {h.name for i in positions for h in cluster.node_hypernodes[i]}
        self.open[cluster.name] = [h for h in self.open.get(cluster.name, cluster.hypernodes.values())
                                   if h.name not in blocked]
        return hold

    def release_holds(self) -> None:
        """Give the held nodes back to the snapshot: holds live for one cycle's decisions."""
        for cluster, taken in self.taken:
            self._lock(cluster, taken, -1)
        self.taken.clear()
        self.held.clear()
        self.open.clear()

    @staticmethod
    def _lock(cluster: ClusterIndex, taken: dict[int, dict[str, int]], sign: int) -> None:
        cluster.apply(taken, {}, (), sign)
        for i in taken:
            cluster.locks[i] += sign


RULE_ORDER = {"ReclaimWithinCohort": 0, "FairSharing": 1, "WithinQueue": 2}


def _why(rule: str, job: PendingJob, victim: RunningPlacement, cluster: str) -> str:
    """The victim's side of a preemption, in words: who took its place, and by which rule."""
    if rule == "WithinQueue":
        return (f"preempted by higher-priority job {job.id} (priority {job.priority} > {victim.priority}) "
                f"of the same queue {job.queue} to make room on {cluster}")
    if rule == "FairSharing":
        return (f"preempted by job {job.id} of tenant {job.tenant}, which is below its fair share of the federation "
                f"while tenant {victim.tenant} is above its own (fair-share preemption), on {cluster}")
    return (f"preempted by job {job.id} of queue {job.queue}, which takes back capacity within its nominal quota "
            f"that queue {victim.queue} of tenant {victim.tenant} had borrowed (reclaim within the cohort), on {cluster}")


def _empty_capacity(cluster: ClusterIndex, positions: list[int]) -> dict[str, int]:
    """What these nodes could hold with nothing running."""
    total: dict[str, int] = {}
    for i in positions:
        add_into(total, cluster.nodes[i].allocatable)
    return total


def _to_placement(request: Request, cluster: ClusterIndex, fit: Fit, score: float) -> Placement:
    binding = fit.binding
    assignments = tuple(NodeAssignment(cluster.nodes[i].name, part, pods)
                        for i in sorted(binding.pods) for part, pods in sorted(binding.pods[i].items()))
    usage = MappingProxyType({cluster.nodes[i].name: MappingProxyType(dict(u)) for i, u in sorted(binding.usage.items())})
    hypernode = fit.hypernode
    return Placement(job_id=request.job.id, part=request.part, cluster=cluster.name,
                     hypernode=hypernode.name if hypernode else None, tier=hypernode.tier if hypernode else None,
                     assignments=assignments, node_usage=usage, exclusive_domains=tuple(sorted(binding.domains)),
                     score=round(score, 6))


def _per_part(placement: Placement, job: PendingJob, cluster: ClusterIndex) -> list[Placement]:
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


def schedule(snapshot: Snapshot, pending: Backlog | Iterable[PendingJob], config: Config = Config(),
             parked: Parked = Parked(), pause: Callable[[], None] = no_pause) -> CycleResult:
    """Decide placements, preemptions and reasons for the pending jobs (a `Backlog`, or jobs in any order to make one
    of; a job belongs to its queue's tenant); the snapshot keeps the decisions.
    `parked`: jobs found inadmissible before, not decided again (no reason for them) while they stay so.
    `pause`: called between decisions and every `JOBS_BETWEEN_PAUSES` jobs walked (for a process whose requests go
    first, `broker.courtesy`); it may wait, and must not change anything the cycle reads."""
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
