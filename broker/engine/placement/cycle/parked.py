"""Parked jobs (after Kueue's inadmissible lists): whether a job that did not fit stays inadmissible while capacity,
quota and held nodes only shrink, and whether a change since it was parked concerns it."""

from __future__ import annotations


from broker.engine.placement.model import PendingJob
from broker.engine.placement.plugins import Request
from broker.engine.placement.snapshot import ClusterIndex


class Parking:
    """What the cycle knows of its inadmissible jobs; a part of `_Cycle`, whose `__init__` sets the state it reads."""

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
        if job.id not in self.parked.jobs or self._may_hold(job) or job.runtime is not None and self.parked.held:
            return False  # (one with a runtime may backfill on nodes held last cycle, as their reservations near)
        if job.shape is None or job.avoided or job.refused:
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
