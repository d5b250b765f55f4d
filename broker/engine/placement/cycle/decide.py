"""Phase 3 of a cycle: one job decided — its quota, then filters and scores per cluster (kept per shape while the
clusters stay as they were), then its gang bound to nodes; or why it waits, per cluster."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from broker.engine.placement.cycle.placements import per_part, to_placement
from broker.engine.placement.decisions import ClusterVerdict, Placement, Preemption, Waiting
from broker.engine.placement.explain import amount, duration, pods_phrase
from broker.engine.placement.model import PendingJob
from broker.engine.placement.plugins import Candidate, Request
from broker.engine.placement.snapshot import ClusterIndex, Fit, eligibility_key


@dataclass(slots=True)
class Outcome:
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: Waiting | None = None
    verdicts: dict[str, ClusterVerdict] = field(default_factory=dict)


@dataclass(slots=True)
class Line:
    """What `_place` made of the clusters for one kind of request (`_Cycle.lines`), by the clusters' order in the
    snapshot: each one's version then (-1: to be asked again) and why it is out of line (None: in line), and the line
    (a heap of the estimates' negative scores)."""

    versions: list[int]
    reasons: list[str | None]
    line: list[tuple[float, str, bool]]


class Deciding:
    """The cycle's decision of one job; a part of `_Cycle`, whose `__init__` sets the state it reads."""

    def _decide_or_recall(self, job: PendingJob) -> Outcome:
        """`decide`, unless a job of the same shape, queue and priority was decided since the last decision that
        changed anything and could be placed nowhere: then it waits for the same reasons (a new leader's first cycle
        over a saturated federation decides each kind of job once, not each job). Not for a job that may take a
        hold, nor one with clusters to avoid or prefer (they read more than its shape)."""
        if (job.shape is None or job.avoided or job.refused or job.previous_clusters or self._may_hold(job)
                or job.runtime is not None and self.holds):  # it may backfill: its runtime counts, not its shape
            return self.decide(job)
        key = (job.shape, job.queue, job.priority)
        if key in self.unplaced:
            return Outcome(waiting=replace(self.unplaced[key], job_id=job.id))
        outcome = self.decide(job)
        if outcome.waiting and not outcome.placements and not outcome.preemptions and job.id not in self.holds:
            self.unplaced[key] = outcome.waiting
        return outcome

    def decide(self, job: PendingJob, explain: bool = False) -> Outcome:
        """Place the job whole (or every part of it), or leave it waiting with reasons; updates the snapshot. Held
        nodes it is expected to leave before their reservation starts are open to it (`_backfill_open`)."""
        opened = self._backfill_open(job)
        try:
            return self._decide(job, explain)
        finally:
            self._backfill_close(opened)

    def _decide(self, job: PendingJob, explain: bool) -> Outcome:
        outcome = Outcome()
        if job.queue not in self.snapshot.queues:
            outcome.waiting = Waiting(job.id, f"queue {job.queue} does not exist", cause="no queue")
            return outcome
        verdict = self._quota(job)
        if not verdict.admissible:
            if not self._preempt(job, outcome, verdict):  # only its own queue's work can make it fit its quota
                outcome.waiting = self._over_quota(job, verdict.message, outcome.verdicts if explain else None)
            return outcome
        reasons: dict[str, str] = {}
        verdicts = outcome.verdicts if explain else None
        together = self._place(self._whole(job), reasons, verdicts)
        if together is not None:
            # A split job that fits one place is kept together: one placement per part, same HyperNode.
            outcome.placements = [together] if job.spec.placement == "whole" else per_part(
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
        outcome.waiting = Waiting(job.id, summary, self._shared(reasons), f"{'hold' if hold else 'capacity'}{part}")
        return outcome

    def _over_quota(self, job: PendingJob, quota: str, verdicts: dict[str, ClusterVerdict] | None) -> Waiting:
        """Why a job its quota holds back waits. The quota, unless no cluster could take it even with quota
        (`_fits_somewhere`): then that, with the quota after it. A queue's usage rises and
        falls around its quota as its smaller jobs take what a big one cannot; were the first check that fails the
        headline, it would flip between the two with each of them, though neither changed for the big job."""
        requests = [self._whole(job)]
        if job.spec.placement == "split":
            requests += self._split(job)
        reasons: dict[str, str] = {}
        for request in requests:
            reasons.clear()
            if self._fits_somewhere(request, reasons, verdicts):
                if request.part is None:
                    return Waiting(job.id, quota, cause="quota")
                continue  # this part could go somewhere: another may not
            if request.part is None and len(requests) > 1:
                continue  # not whole: its parts may still go to different clusters
            part = "" if request.part is None else f" (ReplicatedJob {request.part})"
            return Waiting(job.id, f"no cluster can take it now{part}, and {quota}", self._shared(reasons),
                           f"capacity{part}")
        return Waiting(job.id, quota, cause="quota")

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
               tuple(job.avoided.items()), tuple(job.refused.items()))
        reasons = self.fixed_reasons.get(key)
        if reasons is None:
            reasons = self.fixed_reasons[key] = tuple(self._filter(request, cluster, self.fixed_filters)
                                                      for cluster in self.ordered)
        return key, reasons

    def _place(self, request: Request, reasons: dict[str, str],
               verdicts: dict[str, ClusterVerdict] | None) -> Placement | None:
        """Filter, score on HyperNode totals, then bind the best cluster's gang to nodes; apply it.

        Estimates are optimistic, so when binding lands somewhere worse than estimated the
        cluster is re-scored and goes back in line behind any better estimate.
        """
        kept, known, kind = self._in_line(request, reasons, verdicts)
        return self._bind(request, list(kept.line), known, kind, reasons, verdicts)  # the line is a heap already

    def _in_line(self, request: Request, reasons: dict[str, str],
                 verdicts: dict[str, ClusterVerdict] | None) -> tuple[Line, dict, dict]:
        """The clusters in line for the request (`_line`), why the others are not (into `reasons` and `verdicts`),
        and the estimates and lines kept for its kind of request."""
        cap = self.config.max_candidates_per_tier
        job = request.job
        # what the changing filters, the estimate and the scores say of a cluster follows from the request's shape and
        # part and the cluster's state alone, unless the job prefers clusters it ran on (Locality) or this is a split
        # job's later part (Spread reads where the others went): kept per cluster while its version lasts (a decision
        # changes one or two clusters of fifty), and so is the line they make. The clusters a job avoids never get this
        # far (`_fixed_reasons`).
        shared = job.shape is not None and not job.previous_clusters and not job.refused and not request.clusters_used
        known = self.estimates.setdefault((job.shape, request.part), {}) if shared else {}
        fixed_key, fixed = self._fixed_reasons(request)
        kind = self.lines.setdefault((job.shape, request.part), {}) if shared else {}
        kept = self._line(kind, fixed_key, request, known, fixed, cap)
        out = [(name, reason) for name, reason in zip(self.names, kept.reasons) if reason]
        reasons.update(out)
        if verdicts is not None:
            verdicts.update((name, ClusterVerdict(name, None, reason)) for name, reason in out)
        return kept, known, kind

    def _bind(self, request: Request, line: list, known: dict, kind: dict[tuple, Line], reasons: dict[str, str],
              verdicts: dict[str, ClusterVerdict] | None) -> Placement | None:
        """Bind the gang of the best cluster in line to its nodes; what a cluster's bind found is kept in `known`."""
        cap = self.config.max_candidates_per_tier
        bound: dict[str, Fit] = {}
        while line:
            negative, name, bound_already = heapq.heappop(line)
            cluster = self.snapshot.clusters[name]
            fit = bound.get(name) or cluster.search(request.parts, request.demand, request.bound, cap, bind=True)
            if fit is None:
                self._unfit(request, cluster, known, kind, reasons, verdicts)
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
            placement = to_placement(request, cluster, fit, score)
            self._apply(placement, request.job)
            return placement
        return None

    def _unfit(self, request: Request, cluster: ClusterIndex, known: dict, kind: dict[tuple, Line],
               reasons: dict[str, str], verdicts: dict[str, ClusterVerdict] | None) -> None:
        """The request's gang found no nodes on the cluster its estimate put in line: why, kept until it changes."""
        name = cluster.name
        reasons[name] = self._no_fit(request, cluster)
        known[name] = (cluster.version, reasons[name], None)  # binds no better until the cluster changes
        for other in kind.values():  # where it stands in every line of the shape is what `known` says now
            other.versions[self.position[name]] = -1
        if verdicts is not None:
            verdicts[name] = ClusterVerdict(name, None, reasons[name])

    def _fits_somewhere(self, request: Request, reasons: dict[str, str],
                        verdicts: dict[str, ClusterVerdict] | None) -> bool:
        """Would the request's gang bind to nodes on a cluster in line? Nothing is placed (as `_bind` finds it)."""
        cap = self.config.max_candidates_per_tier
        kept, known, kind = self._in_line(request, reasons, verdicts)
        line = list(kept.line)
        while line:
            cluster = self.snapshot.clusters[heapq.heappop(line)[1]]
            if cluster.search(request.parts, request.demand, request.bound, cap, bind=True) is not None:
                return True
            self._unfit(request, cluster, known, kind, reasons, verdicts)
        return False

    def _line(self, kind: dict[tuple, Line], fixed_key: tuple, request: Request, known: dict,
              fixed: tuple[str | None, ...], cap: int) -> Line:
        """The clusters in line for the request, and why the others are out: the line `_place` made last for this
        kind of request and fixed filters' key, brought up to date — the clusters changed since are asked again (a
        cycle over a saturated federation places thousands of jobs of a few hundred shapes; between two jobs of one
        shape, a few clusters of fifty change)."""
        kept = kind.get(fixed_key)
        if kept is None:
            kept = kind[fixed_key] = Line([-1] * len(self.ordered), [None] * len(self.ordered), [])
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
        what = pods_phrase(part.pods, part.pod_requests, self.answers[key], part.devices)
        if request.bound is not None:
            return (f"needs {amount(request.primary, request.need)} in one tier-{request.bound} "
                    f"HyperNode; those with enough free cannot hold {what} on their nodes")
        return f"free capacity is fragmented: its nodes cannot hold {what}"
