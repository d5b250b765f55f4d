"""What `check_quota` answers for one job (broker/engine/placement/fairness.py): named cases over a tenant of two
queues, q and r, each with a nominal quota of 16 GPUs; the verdict, and its words, exactly."""

from __future__ import annotations

import pytest

from broker.engine.placement import Queue
from broker.engine.placement.fairness import QuotaVerdict, check_quota

from .fixtures import GPU, queue


def gpus(n: float) -> dict[str, int]:
    return {GPU: int(n * 1000)}


CASES = {
    "within its quota": (0, 0, 8, None, QuotaVerdict(True, False)),
    "up to its quota exactly": (8, 0, 8, None, QuotaVerdict(True, False)),
    "borrowing all that r leaves unused": (8, 8, 16, None, QuotaVerdict(True, True)),
    "r borrowed part of q's quota": (4, 24, 12, None, QuotaVerdict(
        False, False, "tenant t's other queues borrowed 8 GPUs of queue q's quota of 16 GPUs; this job needs 12 GPUs "
                      "and waits for it to be given back")),
    "r borrowed all of q's quota": (0, 32, 8, None, QuotaVerdict(
        False, False, "tenant t's other queues borrowed 16 GPUs of queue q's quota of 16 GPUs; this job needs 8 GPUs "
                      "and waits for it to be given back")),
    "more than r leaves unused": (8, 8, 24, None, QuotaVerdict(
        False, True, "queue q is at its quota of 16 GPUs; tenant t's other queues have 8 GPUs to lend and it needs "
                     "16 GPUs more")),
    "more than its borrowing limit": (16, 0, 16, 8, QuotaVerdict(
        False, True, "queue q is at its quota of 16 GPUs and may borrow at most 8 GPUs; this job needs 16 GPUs "
                     "above it")),
    "up to its borrowing limit": (16, 0, 8, 8, QuotaVerdict(True, True)),
}


@pytest.mark.parametrize("case", CASES)
def test_check_quota(case):
    q_used, r_used, wanted, limit, verdict = CASES[case]
    q, r = queue("q", quota=16, borrow=limit), queue("r", quota=16)
    demand = {"cpu": 1000, **gpus(wanted)}  # the CPUs have no quota: the GPUs decide
    assert check_quota(q, gpus(q_used), demand, [(q, gpus(q_used)), (r, gpus(r_used))]) == verdict


def test_every_resource_with_a_quota_is_checked_and_one_millicpu_above_it_borrows():
    quotas = {"cpu": 4000, GPU: 16_000}
    q, r = Queue("q", "t", nominal_quota=quotas), Queue("r", "t", nominal_quota=quotas)
    # the CPUs are within the quota, the GPUs beyond what r lends
    assert check_quota(q, gpus(16), {"cpu": 1000, **gpus(16)}, [(q, gpus(16)), (r, gpus(8))]) == QuotaVerdict(
        False, True, "queue q is at its quota of 16 GPUs; tenant t's other queues have 8 GPUs to lend and it needs "
                     "16 GPUs more")
    assert check_quota(q, {"cpu": 4000}, {"cpu": 1}, [(q, {"cpu": 4000}), (r, {})]) == QuotaVerdict(True, True)
