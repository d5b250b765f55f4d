"""Weighted dominant-resource fairness and quotas with borrowing, as pure functions.

The cycle asks two questions of every queue head and nothing else:
- `weighted_share`: how big is a slice of the federation, in its dominant resource, divided by its
  weight, once this job is admitted? Asked twice (hierarchical DRF, as Kueue's hierarchical cohorts
  and Volcano's hierarchical queues): of the job's tenant, by tenant weight, then of its queue, by
  queue weight; the lowest pair goes next. A tenant's share never depends on how many queues it has.
- `check_quota`: does the job fit the queue's nominal quota, or must it borrow from its tenant's
  other queues (its cohort), and if it cannot, why not?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from broker.engine.placement.explain import amount
from broker.engine.placement.model import Queue, Resources


def dominant_share(usage: Resources, totals: Resources) -> float:
    """The largest fraction of any resource of the federation the usage holds."""
    return max((used / totals[r] for r, used in usage.items() if totals.get(r)), default=0.0)


def weighted_share(usage: Resources, demand: Resources, weight: float, totals: Resources) -> float:
    """Dominant share after admitting `demand`, divided by the queue's weight. (The scheduler asks it twice per
    queue head it orders, for every pending job: it walks the federation's few resources, building nothing.)"""
    share = 0.0
    for resource, total in totals.items():
        if total:
            share = max(share, (usage.get(resource, 0) + demand.get(resource, 0)) / total)
    return share / max(weight, 1e-9)


def fair_shares(tenant_weights: Mapping[str, float], queue_weights: Mapping[str, tuple[str, float]],
                active: Iterable[str]) -> dict[str, float]:
    """Each queue's fair share of the federation: its tenant's weight among the tenants with an `active`
    queue, times the queue's weight among its tenant's active queues (0 for an idle queue).

    `queue_weights` maps each queue to (its tenant, its weight); a tenant absent from `tenant_weights`
    weighs 1.
    """
    active = set(active)
    by_tenant: dict[str, float] = {}
    for name in active:
        tenant, weight = queue_weights[name]
        by_tenant[tenant] = by_tenant.get(tenant, 0.0) + weight
    tenants_total = sum(tenant_weights.get(t, 1.0) for t in by_tenant)
    return {name: (tenant_weights.get(tenant, 1.0) / tenants_total * weight / by_tenant[tenant]
                   if name in active else 0.0)
            for name, (tenant, weight) in queue_weights.items()}


def lent(cohort: Mapping[str, tuple[Resources, Resources]]) -> dict[str, dict[str, int]]:
    """What each queue of one cohort (name -> (nominal quota, usage)) lends: what the others use above their
    nominal quotas, split among the queues with unused nominal quota in proportion to it."""
    borrowed: dict[str, int] = {}
    idle: dict[str, dict[str, int]] = {}  # resource -> queue -> unused nominal quota
    for name, (nominal, usage) in cohort.items():
        for resource, quota in nominal.items():
            used = usage.get(resource, 0)
            if used > quota:
                borrowed[resource] = borrowed.get(resource, 0) + used - quota
            elif quota > used:
                idle.setdefault(resource, {})[name] = quota - used
    result: dict[str, dict[str, int]] = {name: {} for name in cohort}
    for resource, total in borrowed.items():
        unused = sum(idle.get(resource, {}).values())
        for name, spare in idle.get(resource, {}).items():
            result[name][resource] = min(spare, total * spare // unused)
    return result


def tenant_fair_shares(weights: Mapping[str, float], active: Iterable[str]) -> dict[str, float]:
    """Each active tenant's fair share of the federation: its weight over the active tenants' (absent: 1)."""
    active = sorted(set(active))
    total = sum(weights.get(t, 1.0) for t in active)
    return {t: weights.get(t, 1.0) / total for t in active}


def fair_share_allows(preemptor_after: float, preemptor_fair: float, victim_after: float, victim_fair: float) -> bool:
    """May a tenant preempt another's work for fairness? (Kueue's LessThanOrEqualToFinalShare, on fair shares.)

    Yes when the preemptor's tenant, with the job admitted, holds at most its fair share of the federation
    (dominant shares), and the victim's tenant, with the victim gone, still holds at least its own; so the
    preemptor never ends above the victim, relative to their fair shares, and no preemption undoes another.
    """
    slack = 1e-9
    return preemptor_after <= preemptor_fair + slack and victim_after >= victim_fair - slack


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    admissible: bool
    # admitting the job takes the queue above its nominal quota; a job that would not, but is not
    # admissible, waits for what the cohort's other queues borrowed (it may reclaim it)
    borrowing: bool
    message: str = ""  # why it is not admissible, for the tenant


def check_quota(queue: Queue, usage: Resources, demand: Resources,
                cohort: Iterable[tuple[Queue, Resources]]) -> QuotaVerdict:
    """Nominal quota first; above it the queue borrows what its cohort leaves unused, up to its limit.
    Either way the tenant's queues together stay within the sum of their nominal quotas: what one queue
    borrowed, another cannot use until it is given back (reclaimed, or ended).

    `cohort` is every queue of the tenant with its usage, this one included.
    """
    cohort = list(cohort)
    borrowing = False
    for resource, wanted in sorted(demand.items()):
        if resource not in queue.nominal_quota or not wanted:
            continue
        nominal, used = queue.nominal_quota[resource], usage.get(resource, 0)
        over = used + wanted - nominal
        pooled = sum(q.nominal_quota[resource] - u.get(resource, 0) for q, u in cohort
                     if resource in q.nominal_quota)
        if over <= 0:
            if wanted > pooled:
                lent = nominal - used - max(0, pooled)
                return QuotaVerdict(False, False, f"tenant {queue.tenant}'s other queues borrowed "
                                                  f"{amount(resource, lent)} of queue {queue.name}'s quota of "
                                                  f"{amount(resource, nominal)}; this job needs "
                                                  f"{amount(resource, wanted)} and waits for it to be given back")
            continue
        borrowing = True
        limit = (queue.borrowing_limit or {}).get(resource)
        at_quota = f"queue {queue.name} is at its quota of {amount(resource, nominal)}"
        if limit is not None and over > limit:
            return QuotaVerdict(False, True, f"{at_quota} and may borrow at most {amount(resource, limit)}; "
                                             f"this job needs {amount(resource, over)} above it")
        if wanted > pooled:
            lendable = max(0, pooled - max(0, nominal - used))
            return QuotaVerdict(False, True, f"{at_quota}; tenant {queue.tenant}'s other queues have "
                                             f"{amount(resource, lendable)} to lend and it needs "
                                             f"{amount(resource, over)} more")
    return QuotaVerdict(True, borrowing)

