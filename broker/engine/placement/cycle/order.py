"""Phase 2 of a cycle: which queue's head is decided next (`_queue_key`: starvation, nominal quota, the tenant's and
the queue's weighted dominant shares, priorities, submission), and the walk past a queue's parked jobs."""

from __future__ import annotations

import heapq

from broker.engine.placement.fairness import dominant_share, weighted_share
from broker.engine.placement.model import PendingJob
from broker.engine.placement.snapshot import QueueState

JOBS_BETWEEN_PAUSES = 512  # ~1 ms of a cycle's walk past parked jobs


class QueueOrder:
    """The cycle's queue order; a part of `_Cycle`, whose `__init__` sets the state it reads."""

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
            if job.shape is None or job.avoided or job.refused or job.id not in parked:
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
