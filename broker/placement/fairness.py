"""Weighted dominant-resource fairness and quotas with borrowing, as pure functions.

The cycle asks two questions of every queue head and nothing else:
- `weighted_share`: how big is the queue's slice of the federation, in its dominant resource,
  divided by its weight, once this job is admitted? (Armada's and Kueue's DRF: lowest goes next.)
- `check_quota`: does the job fit the queue's nominal quota, or must it borrow from its tenant's
  other queues (its cohort), and if it cannot, why not?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from broker.placement.explain import amount
from broker.placement.model import Queue, Resources


def dominant_share(usage: Resources, totals: Resources) -> float:
    """The largest fraction of any resource of the federation the usage holds."""
    return max((used / totals[r] for r, used in usage.items() if totals.get(r)), default=0.0)


def weighted_share(usage: Resources, demand: Resources, weight: float, totals: Resources) -> float:
    """Dominant share after admitting `demand`, divided by the queue's weight."""
    after = {r: usage.get(r, 0) + demand.get(r, 0) for r in usage.keys() | demand.keys()}
    return dominant_share(after, totals) / max(weight, 1e-9)


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    admissible: bool
    borrowing: bool  # admitting the job takes the queue above its nominal quota
    message: str = ""  # why it is not admissible, for the tenant


def check_quota(queue: Queue, usage: Resources, demand: Resources,
                cohort: Iterable[tuple[Queue, Resources]]) -> QuotaVerdict:
    """Nominal quota first; above it the queue borrows what its cohort leaves unused, up to its limit.

    `cohort` is every queue of the tenant with its usage, this one included.
    """
    cohort = list(cohort)
    borrowing = False
    for resource, wanted in sorted(demand.items()):
        if resource not in queue.nominal_quota or not wanted:
            continue
        nominal, used = queue.nominal_quota[resource], usage.get(resource, 0)
        over = used + wanted - nominal
        if over <= 0:
            continue
        borrowing = True
        limit = (queue.borrowing_limit or {}).get(resource)
        at_quota = f"queue {queue.name} is at its quota of {amount(resource, nominal)}"
        if limit is not None and over > limit:
            return QuotaVerdict(False, True, f"{at_quota} and may borrow at most {amount(resource, limit)}; "
                                             f"this job needs {amount(resource, over)} above it")
        pooled = sum(q.nominal_quota[resource] - u.get(resource, 0) for q, u in cohort
                     if resource in q.nominal_quota)
        if wanted > pooled:
            lendable = max(0, pooled - max(0, nominal - used))
            return QuotaVerdict(False, True, f"{at_quota}; tenant {queue.tenant}'s other queues have "
                                             f"{amount(resource, lendable)} to lend and it needs "
                                             f"{amount(resource, over)} more")
    return QuotaVerdict(True, borrowing)

