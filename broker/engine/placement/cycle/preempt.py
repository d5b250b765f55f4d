"""When a job does not fit: the running jobs its queue's and tenant's policies let it preempt, and the fewest of
them that make room, on the cluster that needs the fewest."""

from __future__ import annotations

from typing import Iterable, Mapping

from broker.engine.placement.cycle.decide import Outcome
from broker.engine.placement.cycle.placements import per_part, to_placement
from broker.engine.placement.decisions import Preemption
from broker.engine.placement.explain import another_tenants_job
from broker.engine.placement.fairness import QuotaVerdict, dominant_share, fair_share_allows
from broker.engine.placement.model import PendingJob, RunningPlacement
from broker.engine.placement.plugins import Candidate, Request
from broker.engine.placement.snapshot import ClusterIndex
from clusters.rules.quantity import add_into


class Preempting:
    """The cycle's preemptions; a part of `_Cycle`, whose `__init__` sets the state it reads."""

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

    def _preempt(self, job: PendingJob, outcome: Outcome, verdict: QuotaVerdict) -> bool:
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
        placement = to_placement(request, cluster, fit, self._score(request, Candidate(cluster, fit.hypernode)))
        self._apply(placement, job)
        # a split job makes room for all of its parts at once, on one cluster: a gang preempts as one
        outcome.placements += [placement] if job.spec.placement == "whole" else per_part(placement, job, cluster)
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


RULE_ORDER = {"ReclaimWithinCohort": 0, "FairSharing": 1, "WithinQueue": 2}


def _why(rule: str, job: PendingJob, victim: RunningPlacement, cluster: str) -> str:
    """The victim's side of a preemption, in words: who took its place, and by which rule."""
    if rule == "WithinQueue":
        return (f"preempted by higher-priority job {job.id} (priority {job.priority} > {victim.priority}) "
                f"of the same queue {job.queue} to make room on {cluster}")
    if rule == "FairSharing":  # across tenants: the preemptor is not named to its victim
        return (f"preempted by {another_tenants_job(job.priority, job.spec.requests)}, whose tenant is below its fair "
                f"share of the federation while tenant {victim.tenant} is above its own (fair-share preemption), "
                f"on {cluster}")
    return (f"preempted by job {job.id} of queue {job.queue}, which takes back capacity within its nominal quota "
            f"that queue {victim.queue} of tenant {victim.tenant} had borrowed (reclaim within the cohort), on {cluster}")
